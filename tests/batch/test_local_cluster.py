"""The local Dask cluster a batch starts: nothing of it beyond loopback, and no fixed port to collide on."""

from __future__ import annotations

from harness.batch.runner import dask_client


def _http_addresses(client) -> set[tuple[str, int]]:
    server = client.cluster.scheduler.http_server
    return {sock.getsockname()[:2] for sock in server._sockets.values()}


def test_two_batches_at_once_serve_their_schedulers_routes_on_loopback_ports_of_their_own() -> None:
    # n workers 0: the scheduler alone (what is checked is where it listens)
    with dask_client(None, 0) as first, dask_client(None, 0) as second:
        ours = [_http_addresses(first), _http_addresses(second)]
        assert all(addresses and {host for host, _ in addresses} == {"127.0.0.1"} for addresses in ours), ours
        ports = [{port for _, port in addresses} for addresses in ours]
        assert not ports[0] & ports[1], "each its own port"
        assert 8787 not in ports[0] | ports[1], "never the dashboard's usual port, which another program may hold"
        assert first.scheduler_info()["address"].startswith("tcp://127.0.0.1:")
