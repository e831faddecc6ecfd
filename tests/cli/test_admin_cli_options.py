"""What every `logstore` admin command shares: --bootstrap-server anywhere and by default the broker `make run`
starts, --command-config, --json, and a usage error as one line with exit status 2."""
from __future__ import annotations

import json

import pytest

import admin_cli_broker
from admin_cli_broker import cli_at, one_line_error
from logstore.broker.admin_commands import ADMIN_COMMANDS, DEFAULT_BOOTSTRAP
from logstore.broker.config import BROKER_SETTINGS
from logstore.cli import build_parser

admin_broker = admin_cli_broker.admin_broker   # the fixture

# A valid command line of each admin command without connection options.
COMMAND_LINES = {
    "transactions": ["transactions", "list"],
    "groups": ["groups", "--list"],
    "share-groups": ["share-groups", "--list"],
    "acls": ["acls", "--list"],
    "configs": ["configs", "--describe", "--entity-type", "topics"],
    "topics": ["topics", "--list"],
    "get-offsets": ["get-offsets"],
}


def test_the_default_bootstrap_server_is_the_brokers_default_listener():
    (default, _) = BROKER_SETTINGS["listeners"]
    assert default == f"PLAINTEXT://{DEFAULT_BOOTSTRAP}"
    assert set(COMMAND_LINES) == set(ADMIN_COMMANDS)
    for name, line in COMMAND_LINES.items():
        args = build_parser().parse_args(line)
        assert (args.bootstrap_server, args.command_config) == (DEFAULT_BOOTSTRAP, None), name


@pytest.mark.parametrize("name", sorted(COMMAND_LINES))
def test_connection_options_before_or_after_the_subcommand(name):
    line = COMMAND_LINES[name]
    for args in (build_parser().parse_args([line[0], "--bootstrap-server", "h:1", "--command-config", "c.properties",
                                            *line[1:]]),
                 build_parser().parse_args([*line, "--bootstrap-server", "h:1", "--command-config", "c.properties"])):
        assert (args.bootstrap_server, args.command_config) == ("h:1", "c.properties"), name
    if name != "acls":   # kafka-acls has no JSON output
        assert build_parser().parse_args([*line, "--json"]).as_json is True
        assert build_parser().parse_args([line[0], "--json", *line[1:]]).as_json is True


def test_transactions_and_groups_take_the_broker_after_the_subcommand(admin_broker):
    b = admin_broker.bootstrap
    for before, after in [(["transactions", "--bootstrap-server", b, "list", "--json"],
                           ["transactions", "list", "--json", "--bootstrap-server", b]),
                          (["groups", "--bootstrap-server", b, "list", "--json"],
                           ["groups", "list", "--bootstrap-server", b, "--json"])]:
        first, second = cli_at(*before), cli_at(*after)
        assert first.returncode == second.returncode == 0, (first.stderr, second.stderr)
        assert json.loads(first.stdout) == json.loads(second.stdout)


@pytest.mark.parametrize("name", sorted(COMMAND_LINES))
def test_a_usage_error_is_one_line_and_exit_2(name):
    one_line_error(cli_at(*COMMAND_LINES[name], "--no-such-flag"), 2, f"logstore {name}: error:",
                   "unrecognized arguments: --no-such-flag")
    one_line_error(cli_at(*COMMAND_LINES[name], "--bootstrap-server", "nowhere"), 2, f"logstore {name}",
                   "'nowhere' is not host:port")
