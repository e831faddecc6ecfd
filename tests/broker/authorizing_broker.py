"""`logstore broker` with an authorizer that denies what the command line says, as a process.

    python authorizing_broker.py OPERATION:TYPE:NAME ... -- KEY=VALUE ...

Each rule denies an AclOperation name on a ResourceType name and resource
name, `*` matching any; everything else is allowed. The `KEY=VALUE` items are
the broker's `--override`s. It prints the same ready line as `logstore broker`
and exits as it does (0 after SIGTERM).
"""
from __future__ import annotations

import sys
from collections.abc import Iterable

from logstore.broker import startup
from logstore.broker.authorizer import AclOperation, KafkaPrincipal, ResourceType


class DenyRules:
    """Allows everything but the (operation, resource type, name) rules it holds; `*` matches any."""

    def __init__(self, rules: Iterable[str]):
        self.rules = [tuple(rule.split(":", 2)) for rule in rules]
        for rule in self.rules:
            if len(rule) != 3:
                raise SystemExit(f"a rule is OPERATION:TYPE:NAME, not {':'.join(rule)!r}")

    def authorize(self, principal: KafkaPrincipal, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str]) -> set[str]:
        """The names no rule denies."""
        return {name for name in names if not any(self._denies(rule, operation, resource_type, name)
                                                  for rule in self.rules)}

    @staticmethod
    def _denies(rule, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        op, kind, pattern = rule
        return op in ("*", operation.name) and kind in ("*", resource_type.name) and pattern in ("*", name)


def main(argv: list[str]) -> int:
    """Run the broker until SIGTERM; its exit status."""
    split = argv.index("--") if "--" in argv else len(argv)
    return startup.run(None, argv[split + 1:], authorizer=DenyRules(argv[:split]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
