"""What security costs the broker: SASL_SSL against PLAINTEXT, and the ACL authorizer against none.

    .venv/bin/python bench/security.py --data-root /dev/shm                  # both pairs, 1,000,000 records
    .venv/bin/python bench/security.py --data-root /dev/shm --pairs tls --count 200000 --rounds 5

Issue 26's targets: produce and consume through SASL_SSL (SCRAM-SHA-512) at ≥ 0.7× the PLAINTEXT
throughput, and with the authorizer on and 1,000 ACLs loaded at ≥ 0.95× the throughput without one. Each
pair compares two variants of this checkout's build, driven by rdkafka_performance exactly as
bench/c_client.py drives it (a fresh broker per (case, round), variants interleaved and their order
reversed every other round, the medians and paired ratios of its table, broker CPU from /proc; read its
docstring), and differs only in what the pair measures:

- `tls`: one broker with a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512; a CA and the broker's
  certificate are made with the openssl command into a temp dir at start, and the SCRAM user with
  `logstore users add` before each broker starts). `plaintext` measures the client on the PLAINTEXT
  listener, `sasl_ssl` the same client on the SASL_SSL one (`-X security.protocol=SASL_SSL -X
  sasl.mechanism=SCRAM-SHA-512 ... -X ssl.ca.location=...`). Topics are made over PLAINTEXT.
- `acls`: one SASL_PLAINTEXT listener (SCRAM-SHA-512) on both sides, a non-super user measured, and
  `super.users=User:admin` for setup. `acls-1000` switches the StandardAuthorizer on and, before anything
  is measured, the admin creates 1,000 ACLs through CreateAcls (a mix of LITERAL and PREFIXED topic and
  group ACLs, ALLOW and DENY, for 200 principals; some PREFIXED ones cover the bench topic's name for
  others) plus the ones that let the measured user write and read the bench topics; `no-authorizer` has
  neither.

A target line under each table compares the paired ratio (the median of the per-round ratios) with the
target. The brokers' CPU per 1M messages is the column to read for what the broker itself pays: TLS's
cost there is OpenSSL's encryption in the broker's threads, the rest should not grow.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from c_client import (
    ROOT,
    Access,
    BrokerSpec,
    Case,
    Results,
    RunningBroker,
    Variant,
    add_case_arguments,
    case_arguments,
    report,
    run,
)
from summary import Summary

if TYPE_CHECKING:
    from confluent_kafka.admin import AclBinding

USER, PASSWORD = "bench", "bench-secret"            # the measured client's principal
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"     # the super user that creates topics and ACLs
MECHANISM = "SCRAM-SHA-512"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_COUNT = 1000
PRINCIPALS = 200                                    # the others' principals among which the 1,000 ACLs fall
TARGETS = {"tls": 0.7, "acls": 0.95}                # issue 26: the second variant's throughput / the first's
ADMIN_TIMEOUT = 60.0                                # s: one CreateAcls or DescribeAcls answer


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def make_certs(directory: Path) -> tuple[Path, Path]:
    """A CA and the broker's key and certificate for 127.0.0.1: (the CA's PEM, the broker's keystore PEM)."""
    _openssl(directory, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", "ca.key")
    _openssl(directory, "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=logstore bench CA", "-days", "2",
             "-out", "ca.pem")
    _openssl(directory, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-out", "broker.key")
    _openssl(directory, "req", "-new", "-key", "broker.key", "-subj", "/CN=localhost", "-out", "broker.csr")
    (directory / "broker.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    _openssl(directory, "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "broker.ext", "-out", "broker.pem")
    keystore = directory / "broker-keystore.pem"
    keystore.write_text("".join((directory / name).read_text() for name in ("broker.key", "broker.pem", "ca.pem")))
    return directory / "ca.pem", keystore


@dataclass(frozen=True)
class AddUsers:
    """A `prepare` step: `logstore users add` of each SCRAM user → password into a data dir before the broker
    first starts (as kafka-storage format --add-scram)."""

    python: Path
    users: dict[str, str]

    def __call__(self, data_dir: Path) -> None:
        for user, password in self.users.items():
            done = subprocess.run([str(self.python), "-m", "logstore", "users", "add", "--log-dirs", str(data_dir),
                                   "--mechanism", MECHANISM, "--user", user, "--password", password],
                                  capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"logstore users add --user {user} exited {done.returncode}: "
                                   f"{done.stderr.strip() or done.stdout.strip()}")


def scram(user: str, password: str) -> dict[str, str]:
    """librdkafka's settings for SCRAM-SHA-512 as `user`."""
    return {"sasl.mechanism": MECHANISM, "sasl.username": user, "sasl.password": password}


def tls_pair(python: Path, certs: Path) -> list[Variant]:
    """`plaintext` and `sasl_ssl`: one broker with both listeners, the client on one or the other."""
    ca, keystore = make_certs(certs)
    listeners = (("PLAINTEXT", "PLAINTEXT"), ("SASL_SSL", "SASL_SSL"))
    overrides = ("ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}", f"sasl.enabled.mechanisms={MECHANISM}")
    prepare = AddUsers(python, {USER: PASSWORD})
    secure = Access("SASL_SSL", {"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca), **scram(USER, PASSWORD)})
    return [Variant(listeners, overrides, Access("PLAINTEXT"), Access("PLAINTEXT"), prepare),
            Variant(listeners, overrides, secure, Access("PLAINTEXT"), prepare)]


def bench_acl_bindings() -> list[AclBinding]:
    """What lets the measured user produce to and consume the bench topics (`bench-<round>`)."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return [AclBinding(ResourceType.TOPIC, "bench-", ResourcePatternType.PREFIXED, f"User:{USER}", "*", operation,
                       AclPermissionType.ALLOW)
            for operation in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]


def other_acl_bindings(count: int = ACL_COUNT) -> list[AclBinding]:
    """`count` ACLs of other principals, as a shared cluster collects them: each principal's own topics
    (LITERAL), its team's topics and groups (PREFIXED, prefixes of several lengths, some covering `bench-`),
    a few DENYs and host-bound entries."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    out: list[AclBinding] = []
    i = 0
    while len(out) < count:
        principal, team = f"User:app-{i % PRINCIPALS:03d}", f"team-{i % 20}"
        host = "*" if i % 7 else f"10.0.{i % 250}.{i % 200 + 1}"
        # A prefix of "bench-" for a few principals, so the bench topic's own lookups meet other ACLs.
        near = "bench-"[: 1 + i % 6] if i % 25 == 0 else f"{team}."
        round_ = i // PRINCIPALS
        out += [
            AclBinding(ResourceType.TOPIC, f"orders-{i}", literal, principal, host, AclOperation.WRITE, allow),
            AclBinding(ResourceType.TOPIC, f"orders-{i}", literal, principal, "*", AclOperation.DESCRIBE, allow),
            AclBinding(ResourceType.TOPIC, near, prefixed, principal, "*",
                       AclOperation.READ if round_ % 2 == 0 else AclOperation.DESCRIBE, allow),
            AclBinding(ResourceType.GROUP, f"{team}-", prefixed, principal, "*", AclOperation.READ, allow),
            AclBinding(ResourceType.TOPIC, f"payments-{i}", literal, principal, "*", AclOperation.READ,
                       deny if i % 3 == 0 else allow),
        ]
        i += 1
    return out[:count]


def create_acls(broker: RunningBroker) -> None:
    """The ACLs of `acls-1000`, created by the super user through CreateAcls and checked with DescribeAcls."""
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin_access = broker.spec.variant.admin
    admin = AdminClient({"bootstrap.servers": broker.address(admin_access), **admin_access.settings})
    bindings = [*other_acl_bindings(), *bench_acl_bindings()]
    for future in admin.create_acls(bindings, request_timeout=ADMIN_TIMEOUT).values():
        future.result(ADMIN_TIMEOUT)
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    loaded = admin.describe_acls(every, request_timeout=ADMIN_TIMEOUT).result(ADMIN_TIMEOUT)
    if len(loaded) != len(bindings):
        raise RuntimeError(f"{len(loaded)} ACLs loaded of {len(bindings)} created")


def acls_pair(python: Path) -> list[Variant]:
    """`no-authorizer` and `acls-1000`: one SASL_PLAINTEXT listener, a non-super user measured."""
    listeners = (("SASL_PLAINTEXT", "SASL_PLAINTEXT"),)
    overrides = (f"sasl.enabled.mechanisms={MECHANISM}", f"super.users=User:{ADMIN}")
    prepare = AddUsers(python, {USER: PASSWORD, ADMIN: ADMIN_PASSWORD})
    client = Access(None, {"security.protocol": "SASL_PLAINTEXT", **scram(USER, PASSWORD)})
    admin = Access(None, {"security.protocol": "SASL_PLAINTEXT", **scram(ADMIN, ADMIN_PASSWORD)})
    return [Variant(listeners, overrides, client, admin, prepare),
            Variant(listeners, (*overrides, f"authorizer.class.name={STANDARD_AUTHORIZER}"), client, admin, prepare,
                    create_acls)]


PAIRS = {"tls": ("plaintext", "sasl_ssl"), "acls": ("no-authorizer", "acls-1000")}


def target_lines(results: Results, specs: list[BrokerSpec], cases: list[Case], modes: list[str],
                 target: float, summary: Summary) -> str:
    """Each case's and mode's paired ratio (second variant / first, the median over rounds) against `target`,
    also as rows of `summary`."""
    lines = []
    for case in cases:
        for mode in modes:
            first, second = (results.samples[(case.name, mode, spec.label)] for spec in specs)
            ratios = [s.msgs_per_s / f.msgs_per_s for f, s in zip(first, second)]
            paired = statistics.median(ratios)
            summary.row(f"{case.name} {mode} {specs[1].label} / {specs[0].label}", paired, verdict=paired >= target,
                        target=target, ours=f"{statistics.median(s.msgs_per_s for s in second):,.0f} msgs/s",
                        peer=f"{statistics.median(f.msgs_per_s for f in first):,.0f} msgs/s",
                        note="paired: the median of per-round ratios")
            lines.append(f"target: {case.name} {mode:<7} {specs[1].label} / {specs[0].label} paired {paired:.2f} "
                         f"(rounds {min(ratios):.2f}..{max(ratios):.2f}) vs >= {target:.2f}: "
                         f"{'met' if paired >= target else 'MISSED'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run each pair's rounds, print a table per pair and the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default="tls,acls", help="tls and/or acls (default both)")
    add_case_arguments(parser)
    args = parser.parse_args(argv)
    modes, cases = case_arguments(parser, args)
    pairs = [p for p in args.pairs.split(",") if p]
    if not set(pairs) <= set(PAIRS):
        parser.error(f"--pairs takes {' and/or '.join(PAIRS)}")
    python = BrokerSpec("logstore", "logstore", ROOT).python
    certs = Path(tempfile.mkdtemp(prefix="security-bench-certs-"))
    summary = Summary("security", "What security costs the broker: SASL_SSL vs PLAINTEXT, ACLs vs none")
    try:
        for pair in pairs:
            variants = tls_pair(python, certs) if pair == "tls" else acls_pair(python)
            specs = [BrokerSpec(label, "logstore", ROOT, variant) for label, variant in zip(PAIRS[pair], variants)]
            results = run(specs, cases, modes, args.rounds, args.jemalloc, (), args.data_root)
            table = report(results, specs, cases, modes, args.rounds)
            targets = target_lines(results, specs, cases, modes, TARGETS[pair], summary)
            print(f"\n== {pair}: {' vs '.join(PAIRS[pair])}\n{table}\n{targets}", flush=True)
    finally:
        shutil.rmtree(certs, ignore_errors=True)
    summary.write()


if __name__ == "__main__":
    main()
