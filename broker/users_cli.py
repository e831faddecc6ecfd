"""`logstore users`: SCRAM credentials in a data directory, offline, as `kafka-storage format --add-scram`.

The arguments are registered in `logstore/cli.py`; `run(args)` does the
work on the `scram-credentials` files of the log dirs named by `--log-dirs
DIR[,DIR]` or by `log.dirs` of `--config server.properties`. Changes are for
a broker that is not running (before the first start, or while stopped): a
log dir a broker holds (its `.lock`) is refused with one line; a running
broker's credentials change with AlterUserScramCredentials (`kafka-configs
--alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users`).

- `add --mechanism M --user U (--password P | --password-file F) [--iterations N]`:
  a new salt, the password salted and iterated (N: 4096 by default, 4096..16384
  as Kafka's controller allows); the password itself is not kept. Without
  --password or --password-file the password is asked on the terminal (twice),
  or read as one line from standard input when that is not a terminal.
- `list [--json]`: one row per user and mechanism, with the iterations (no lock taken).
- `delete --user U [--mechanism M]`: the user's credential for M, or all of them.

`--json` of list: {"users": [{"user": str, "mechanism": str, "iterations": int}]}.

Exit status: 0 done; 1 refused (a log dir in use by a broker, nothing to
delete, a file that does not parse, an I/O error), with one line on stderr;
2 bad arguments.
"""
from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable
from typing import TextIO

from logstore.broker.config import BrokerConfig
from logstore.broker.scram import MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS
from logstore.broker.scram_store import ScramCredentialStore, kafka_credentials
from logstore.broker.transactions_cli import UsageError, print_table
from logstore.checkpoints import fsync_dir
from logstore.dir_lock import DirLock
from logstore.errors import InvalidConfigError, LogStoreError
from logstore.kafka_metadata import read_kafka_metadata

__all__ = ["run", "DEFAULT_ITERATIONS", "UsageError"]

PROG = "logstore users"
# Kafka's default for `--add-scram` and `kafka-configs` (the mechanism's minimum).
DEFAULT_ITERATIONS = MIN_ITERATIONS


class Refused(Exception):
    """What the command cannot do (exit status 1)."""


def _log_dirs(args: argparse.Namespace) -> list[str]:
    if (args.log_dirs is None) == (args.config is None):
        raise UsageError("give the data directories with --log-dirs DIR[,DIR] or --config server.properties "
                         "(one of them)")
    if args.log_dirs is not None:
        dirs = [d.strip() for d in args.log_dirs.split(",") if d.strip()]
        if not dirs:
            raise UsageError("--log-dirs: no directory given")
        return dirs
    try:
        return BrokerConfig.load(args.config).log_dirs
    except (InvalidConfigError, OSError) as exc:
        raise UsageError(f"--config {args.config}: {exc}") from None


def _mechanisms(args: argparse.Namespace, required: bool) -> list[str]:
    if args.mechanism is None:
        if required:
            raise UsageError(f"--mechanism is required ({', '.join(SCRAM_MECHANISMS)})")
        return list(SCRAM_MECHANISMS)
    if args.mechanism not in SCRAM_MECHANISMS:
        raise UsageError(f"--mechanism {args.mechanism}: not a SCRAM mechanism ({', '.join(SCRAM_MECHANISMS)})")
    return [args.mechanism]


def _password(args: argparse.Namespace) -> str:
    if args.password is not None and args.password_file is not None:
        raise UsageError("give the password once: --password or --password-file")
    password: str
    if args.password is not None:
        password = args.password
    elif args.password_file is not None:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                password = f.read().removesuffix("\n").removesuffix("\r")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--password-file {args.password_file}: {exc}") from None
    elif sys.stdin.isatty():
        password = getpass.getpass(f"Password for {args.user}: ")
        if getpass.getpass("Again: ") != password:
            raise UsageError("the two passwords differ")
    else:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    if not password:
        raise UsageError("the password is empty")
    return password


def _locked(dirs: list[str], change: Callable[[ScramCredentialStore], None]) -> None:
    """Run `change` on the store with every log dir's `.lock` held, so no broker starts meanwhile."""
    locks: list[DirLock] = []
    try:
        for log_dir in dirs:
            if not os.path.isdir(log_dir):
                # A data directory made before the first start, as kafka-storage format makes it.
                os.makedirs(log_dir, exist_ok=True)
                fsync_dir(os.path.dirname(os.path.abspath(log_dir)))
            locks.append(DirLock(log_dir))
        # A directory Kafka wrote keeps its users: our file starts from the credentials of its metadata log,
        # as the broker's first start would take them (it takes them only while no file of ours exists).
        metadata = read_kafka_metadata(dirs, {})
        change(ScramCredentialStore(dirs, kafka=kafka_credentials(metadata.cluster.scram_credentials)
                                    if metadata is not None else None))
    finally:
        for lock in locks:
            lock.release()


def _add(args: argparse.Namespace, out: TextIO) -> int:
    mechanism = _mechanisms(args, required=True)[0]
    if not args.user:
        raise UsageError("--user must not be empty")
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise UsageError(f"--iterations {args.iterations}: must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    dirs = _log_dirs(args)
    password = _password(args)
    _locked(dirs, lambda store: store.set_password(args.user, mechanism, password, args.iterations))
    print(f"{mechanism} credential of {args.user} stored ({args.iterations} iterations) in {', '.join(dirs)}",
          file=out)
    return 0


def _delete(args: argparse.Namespace, out: TextIO) -> int:
    mechanisms = _mechanisms(args, required=False)
    dirs = _log_dirs(args)
    deleted: list[str] = []

    def change(store: ScramCredentialStore) -> None:
        present = [m for m in mechanisms if store.get(args.user, m) is not None]
        if not present:
            what = args.mechanism or "SCRAM"
            raise Refused(f"user {args.user!r} has no {what} credential in {', '.join(dirs)}")
        store.alter({(args.user, m): None for m in present})
        deleted.extend(present)
    _locked(dirs, change)
    print(f"{', '.join(deleted)} credential{'s' if len(deleted) > 1 else ''} of {args.user} deleted", file=out)
    return 0


def _list(args: argparse.Namespace, out: TextIO) -> int:
    store = ScramCredentialStore(_log_dirs(args))
    rows = [(user, mechanism, iterations) for user, found in store.users().items()
            for mechanism, iterations in sorted(found.items())]
    if args.as_json:
        json.dump({"users": [{"user": u, "mechanism": m, "iterations": i} for u, m, i in rows]}, out)
        out.write("\n")
    else:
        print_table(["USER", "MECHANISM", "ITERATIONS"], rows, out)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {"add": _add, "list": _list, "delete": _delete}


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run one `logstore users` command; the exit status (0 done, 1 refused, 2 usage)."""
    out = sys.stdout if out is None else out
    try:
        return COMMANDS[args.users_command](args, out)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except (Refused, LogStoreError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{PROG}: I/O error: {exc}", file=sys.stderr)
        return 1
