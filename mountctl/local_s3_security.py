"""What keeps other local users out of the embedded S3 server: weed's ``security.toml``.

``weed mini`` serves master, volume, filer and admin on 127.0.0.1 beside S3, over HTTP
and gRPC.  Loopback is no boundary on a shared node: without this file any local user
reads and writes every object through the filer port, or makes themselves an admin key
with ``weed shell ... s3.configure`` over gRPC.  The S3 keys guard only the S3 port.

So each start writes, into the server's private (0700) dir, a 0600 ``security.toml``
that weed reads from its working directory:

- JWT signing keys (write and read) for the volume and filer HTTP ports: a request
  without a token signed by the key gets 401;
- mutual TLS on every gRPC port, from a CA made for this server alone: a client
  without the client certificate (another user's ``weed shell``) cannot connect.

Our own ``weed shell`` (``local_s3_identities``) runs in the same dir and so reads the
same file.  Keys and certificates are new at every start: nothing outside the server needs them.
"""

from __future__ import annotations

import datetime
import os
import secrets

from .paths import write_private

__all__ = ["write_security_config", "SECURITY_FILE"]

SECURITY_FILE = "security.toml"
_JWT_SECTIONS = ("jwt.signing", "jwt.signing.read", "jwt.filer_signing", "jwt.filer_signing.read")
# Every gRPC role weed mini runs, and the client role weed shell and the components use to call each other.
_GRPC_ROLES = ("master", "volume", "filer", "s3", "admin", "worker", "msg_broker", "client")
_VALID_DAYS = 3650


def _pem_pair(name: str, *, ca: tuple[object, object] | None) -> tuple[bytes, bytes, object, object]:
    """A key and a certificate (signed by ``ca``, or self-signed as a CA when None), as PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_cert, issuer_key = ca if ca else (None, key)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)  # type: ignore[attr-defined]
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS)))
    if ca is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    else:
        import ipaddress

        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())  # type: ignore[arg-type]
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM), cert, key


def write_security_config(server_dir: str) -> str:
    """Write a fresh ``security.toml`` (and its TLS files under ``tls/``) into ``server_dir``; return its path."""
    tls = os.path.join(server_dir, "tls")
    os.makedirs(tls, mode=0o700, exist_ok=True)
    os.chmod(tls, 0o700)
    _, ca_pem, ca_cert, ca_key = _pem_pair("mountctl local S3 CA", ca=None)
    key_pem, cert_pem, _, _ = _pem_pair("mountctl-local-s3", ca=(ca_cert, ca_key))
    files = {"ca.crt": ca_pem, "node.crt": cert_pem, "node.key": key_pem}
    for name, content in files.items():
        write_private(os.path.join(tls, name), content)
    lines = ["# written by mountctl.local_s3_security at each start; see docs/security.md", ""]
    for section in _JWT_SECTIONS:
        lines += [f"[{section}]", f'key = "{secrets.token_urlsafe(32)}"', "expires_after_seconds = 60", ""]
    lines += ["[access]", "ui = false", ""]  # the master's and volume's status pages
    lines += ["[grpc]", f'ca = "{os.path.join(tls, "ca.crt")}"', ""]
    for role in _GRPC_ROLES:
        lines += [f"[grpc.{role}]", f'cert = "{os.path.join(tls, "node.crt")}"',
                  f'key = "{os.path.join(tls, "node.key")}"', ""]
    path = os.path.join(server_dir, SECURITY_FILE)
    write_private(path, "\n".join(lines))
    return path
