"""What keeps other local users out of the embedded S3 server: weed's flags and its ``security.toml``.

``weed mini`` serves master, volume, filer and admin on 127.0.0.1 beside S3, over HTTP
and gRPC.  Loopback is no boundary on a shared node: every local user connects from
127.0.0.1 (so weed's IP whitelist, ``guard.white_list``, cannot tell them from the owner).
Without what follows any local user reads and writes every object through the filer port,
erases a bucket's volumes with the master's ``/col/delete``, or makes themselves an admin
key with ``weed shell ... s3.configure`` over gRPC.  The S3 keys guard only the S3 port.

So each start

- passes ``CLOSING_FLAGS``: ``-disableHttp`` leaves the master's and filer's HTTP ports
  without their API (``/dir/assign``, ``/col/delete``, ``/vol/grow``, ``/submit``, the
  filer's reads and writes: routes no key of ``security.toml`` guards on the master), and
  the admin UI is off; everything of ours reaches them over gRPC;
- runs weed with umask ``SERVER_UMASK``: what it creates, its gRPC sockets in /tmp too, is
  the owner's alone;
- writes, into the server's private (0700) dir, a 0600 ``security.toml`` that weed reads
  from its working directory: JWT signing keys (write and read) for the volume and filer
  HTTP ports (a request without a token signed by the key gets 401), and mutual TLS on
  every gRPC port, from a CA made for this server alone (a client without the client
  certificate, another user's ``weed shell``, cannot connect).

What weed still answers anyone: the master's status page (``/``: topology, volume counts),
the volume's ``/status`` (volume ids, sizes, collections, which are the bucket names),
health and metrics pages: no object names, no bytes.  No setting of weed closes them
(docs/security.md).

Our own ``weed shell`` (``identities``) runs in the same dir and so reads the
same file.  Keys and certificates are new at every start: nothing outside the server needs them.
"""

from __future__ import annotations

import datetime
import os
import secrets

from ..paths import write_private

__all__ = ["write_security_config", "SECURITY_FILE", "CLOSING_FLAGS", "SERVER_UMASK"]

# weed mini's flags that close what security.toml cannot: the master's and filer's HTTP API, the admin UI.
CLOSING_FLAGS = ("-disableHttp", "-admin.ui=false")
SERVER_UMASK = 0o077

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
    lines = ["# written by mountctl.local_s3.security at each start; see docs/security.md", ""]
    for section in _JWT_SECTIONS:
        lines += [f"[{section}]", f'key = "{secrets.token_urlsafe(32)}"', "expires_after_seconds = 60", ""]
    lines += ["[access]", "ui = false", ""]  # the volume's /ui/index.html (the master's page ignores it)
    lines += ["[grpc]", f'ca = "{os.path.join(tls, "ca.crt")}"', ""]
    for role in _GRPC_ROLES:
        lines += [f"[grpc.{role}]", f'cert = "{os.path.join(tls, "node.crt")}"',
                  f'key = "{os.path.join(tls, "node.key")}"', ""]
    path = os.path.join(server_dir, SECURITY_FILE)
    write_private(path, "\n".join(lines))
    return path
