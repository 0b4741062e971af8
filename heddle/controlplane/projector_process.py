"""The ledger projector as a process: ``python -m heddle.controlplane.projector_process``
(``--help`` for options) runs the ``Projector`` (``heddle.controlplane.projector``) under its keeper
(``heddle.controlplane.ledger_recovery``); SIGTERM or SIGINT stop it after the current batch.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from heddle.bus import Bus
from heddle.config import Settings, load_settings
from heddle.controlplane.ledger_recovery import LedgerKeeper
from heddle.controlplane.projector import ProjectorConfig, ProjectorStats
from heddle.errors import UserError
from heddle.ledger.database import open_ledger
from heddle.ledger.writer import LEDGER_CONSUMER


async def serve_projector(
    settings: Settings, config: ProjectorConfig, *, until_idle: bool
) -> ProjectorStats:
    """Run a projector process: stops on SIGTERM / SIGINT after the current batch."""
    ledger = await asyncio.to_thread(open_ledger, settings.ledger_url)
    keeper: LedgerKeeper | None = None
    try:
        async with Bus(settings) as bus:
            keeper = LedgerKeeper(bus, settings, ledger, config)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, keeper.stop)
            return await keeper.run(until_idle=until_idle)
    finally:
        (keeper.ledger if keeper is not None else ledger).close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m heddle.controlplane.projector_process", description=__doc__
    )
    parser.add_argument("--nats-url", help="NATS URL (default: HEDDLE_NATS_URL or embedded)")
    parser.add_argument("--database-url", help="ledger URL (default: HEDDLE_DATABASE_URL)")
    parser.add_argument("--data-dir", type=Path, help="local state folder (HEDDLE_DATA_DIR)")
    parser.add_argument("--nats-creds", type=Path, help="NATS credential file (HEDDLE_NATS_CREDS)")
    parser.add_argument("--nats-tls-ca", type=Path, help="NATS TLS CA (HEDDLE_NATS_TLS_CA)")
    parser.add_argument("--consumer", default=LEDGER_CONSUMER, help="durable consumer name")
    parser.add_argument("--batch-size", type=int, default=ProjectorConfig().batch_size)
    parser.add_argument("--until-idle", action="store_true", help="exit once caught up")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = load_settings(
        nats_url=args.nats_url,
        database_url=args.database_url,
        data_dir=args.data_dir,
        nats_creds=args.nats_creds,
        nats_tls_ca=args.nats_tls_ca,
    )
    config = ProjectorConfig(consumer=args.consumer, batch_size=args.batch_size)
    try:
        stats = asyncio.run(serve_projector(settings, config, until_idle=args.until_idle))
    except UserError as exc:  # a stopped projection (damaged ledger), an unreachable server
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print(
        f"projected {stats.num_projected} events in {stats.num_batches} batches; "
        f"position {stats.position}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
