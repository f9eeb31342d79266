"""A forked reader's first S3 client does not parse botocore's models again.

A mount route's first training batch waits for each worker's first version check (a HEAD
through a new client): parsing S3's service model and endpoint rules in every worker took
most of that batch (about 1 s on a busy 2-core machine). No server is needed: building a
client sends no request.
"""

from __future__ import annotations

import multiprocessing

from mountctl import S3Settings
from mountctl.s3 import objects

SETTINGS = S3Settings(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="AKIDEXAMPLE",
                      secret_access_key="not-a-real-secret")


def _files_parsed_by_a_new_client(queue: multiprocessing.Queue) -> None:
    import botocore.loaders

    parsed: list[str] = []
    load_file = botocore.loaders.JSONFileLoader.load_file

    def counting(self: object, file_path: str) -> object:
        parsed.append(file_path)
        return load_file(self, file_path)

    botocore.loaders.JSONFileLoader.load_file = counting  # type: ignore[method-assign]  # this child only
    objects._new_client(SETTINGS, 5, 30, 2)
    queue.put(parsed)


def test_a_forked_process_builds_its_client_from_the_parents_parsed_models():
    objects._new_client(SETTINGS, 5, 30, 2)  # the parent's first client, as the trainer's manifest read makes
    context = multiprocessing.get_context("fork")  # as DataLoader workers start on Linux
    queue = context.Queue()
    child = context.Process(target=_files_parsed_by_a_new_client, args=(queue,))
    child.start()
    try:
        parsed = queue.get(timeout=60)
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert parsed == []


def test_clients_share_one_loader_whose_search_path_does_not_grow():
    objects._new_client(SETTINGS, 5, 30, 2)
    paths = list(objects._shared_loader().search_paths)
    for _ in range(3):
        objects._new_client(SETTINGS, 5, 30, 2)
    assert objects._shared_loader().search_paths == paths
    assert len(set(paths)) == len(paths)
