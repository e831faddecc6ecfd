"""Who a TLS client is: the subject of its certificate as Kafka names it, mapped by `ssl.principal.mapping.rules`.

Kafka takes the subject's distinguished name in RFC 2253 form (Java's
`X500Principal.getName()`: the last RDN first, `CN=alice,OU=eng,O=Example`,
attributes other than CN, C, L, ST, O, OU, STREET, DC and UID as
`<oid>=#<DER hex>`) and runs it through the rules in order; the first that
applies gives the name of `User:<name>`. A rule is `DEFAULT` (the DN as it
is) or `RULE:<regex>/<replacement>/[L|U]`: the regex must match the whole DN,
the replacement may use `$1`..., and `L`/`U` lower- or upper-case the result.
A DN no rule applies to is refused, as Kafka refuses the connection.

The subject is read from the certificate's DER, since the `ssl` module's
parsed form loses the string types the hex form needs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from logstore.errors import InvalidConfigError

__all__ = ["PrincipalMapper", "NoMatchingRule", "subject_alt_names", "subject_dn"]

# Kafka's rule list syntax (SslPrincipalMapper): rules separated by commas, a slash or backslash in a
# rule's regex or replacement escaped with a backslash.
_RULE = re.compile(r"((DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?))(,\s*|$)")
_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O", "2.5.4.11": "OU",
             "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC", "0.9.2342.19200300.100.1.1": "UID"}
_STRING_TYPES = {0x0C: "utf-8", 0x13: "ascii", 0x16: "ascii", 0x14: "latin-1", 0x1E: "utf-16-be",
                 0x1C: "utf-32-be"}
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06


class NoMatchingRule(Exception):
    """No rule of `ssl.principal.mapping.rules` applies to a client's DN."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None     # None: DEFAULT
    replacement: str
    case: str

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        return result.lower() if self.case == "L" else result.upper() if self.case == "U" else result


class PrincipalMapper:
    """`ssl.principal.mapping.rules`, parsed once: `name(dn)` is the principal name of a client's DN."""

    def __init__(self, rules: str, setting: str = "ssl.principal.mapping.rules"):
        self.rules: list[_Rule] = []
        text = rules.strip() or "DEFAULT"
        position = 0
        while position < len(text):
            match = _RULE.match(text, position)
            if match is None or match[6] is not None and match[6].strip():
                bad = (match[6] if match is not None else text[position:]).strip()
                raise InvalidConfigError(f"{setting}: invalid rule {bad!r}: DEFAULT or RULE:regex/replacement/[LU]")
            position = match.end() if match.end() > position else len(text)
            if match[2]:
                self.rules.append(_Rule(None, "", ""))
            elif match[3] is not None:
                try:
                    pattern = re.compile(_unescape(match[3]))
                except re.error as exc:
                    raise InvalidConfigError(f"{setting}: invalid regex {match[3]!r}: {exc}") from None
                self.rules.append(_Rule(pattern, _java_replacement(_unescape(match[4])), match[5]))

    def name(self, dn: str) -> str:
        """The principal name the first applying rule gives `dn`; NoMatchingRule if none applies."""
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self.rules}")


def _unescape(text: str) -> str:
    return re.sub(r"\\([\\/])", r"\1", text)


def _java_replacement(text: str) -> str:
    """Java's `$1` group references as Python's `\\g<1>`; a literal backslash kept literal."""
    return re.sub(r"\$(\d+)", r"\\g<\1>", text.replace("\\", "\\\\"))


def subject_dn(der: bytes) -> str:
    """The subject of a DER certificate as Java's X500Principal.getName() (RFC 2253) writes it."""
    certificate = _children(_one(der, 0, _SEQUENCE))
    tbs = _children(certificate[0])
    fields = tbs[1:] if tbs[0][0] == 0xA0 else tbs   # [0] version is optional
    # serialNumber, signature, issuer, validity, subject
    subject = fields[4]
    rdns = []
    for rdn in _children(subject):
        parts = []
        for pair in _children(rdn):
            oid_tlv, value = _children(pair)
            parts.append(_attribute(_oid(oid_tlv[2]), value))
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


_Tlv = tuple[int, bytes, bytes]   # (tag, whole TLV, contents)
_EXTENSIONS = 0xA3                  # tbsCertificate's [3] EXPLICIT Extensions
_SUBJECT_ALT_NAME = "2.5.29.17"


def subject_alt_names(der: bytes) -> frozenset[tuple[int, bytes]]:
    """The subjectAltName entries of a DER certificate, each (GeneralName tag, contents): what Kafka compares
    when a listener's keystore is replaced."""
    tbs = _children(_children(_one(der, 0, _SEQUENCE))[0])
    for field in tbs:
        if field[0] != _EXTENSIONS:
            continue
        for extension in _children(_children(field)[0]):
            parts = _children(extension)
            if _oid(parts[0][2]) == _SUBJECT_ALT_NAME:
                names = _one(parts[-1][2], 0, _SEQUENCE)   # extnValue's OCTET STRING holds GeneralNames
                return frozenset((name[0], name[2]) for name in _children(names))
    return frozenset()


def _one(data: bytes, offset: int, tag: int) -> _Tlv:
    tlv, _ = _read(data, offset)
    if tlv[0] != tag:
        raise ValueError(f"DER: tag {tlv[0]:#x} where {tag:#x} was expected")
    return tlv


def _read(data: bytes, offset: int) -> tuple[_Tlv, int]:
    if offset + 2 > len(data):
        raise ValueError("DER: truncated")
    tag, length = data[offset], data[offset + 1]
    start = offset + 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or start + count > len(data):
            raise ValueError("DER: bad length")
        length = int.from_bytes(data[start:start + count], "big")
        start += count
    end = start + length
    if end > len(data):
        raise ValueError("DER: truncated")
    return (tag, data[offset:end], data[start:end]), end


def _children(tlv: _Tlv) -> list[_Tlv]:
    contents, found, offset = tlv[2], [], 0
    while offset < len(contents):
        child, offset = _read(contents, offset)
        found.append(child)
    return found


def _oid(contents: bytes) -> str:
    if not contents:
        raise ValueError("DER: empty OID")
    first = contents[0]
    arcs = [min(first // 40, 2), first - 40 * min(first // 40, 2)]
    value = 0
    for byte in contents[1:]:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    return ".".join(map(str, arcs))


def _attribute(oid: str, value: _Tlv) -> str:
    keyword = _KEYWORDS.get(oid)
    encoding = _STRING_TYPES.get(value[0])
    if keyword is None or encoding is None:
        return f"{oid}=#{value[1].hex()}"
    return f"{keyword}={_escape(value[2].decode(encoding, 'replace'))}"


def _escape(text: str) -> str:
    escaped = re.sub(r'([,+"\\<>;])', r"\\\1", text)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
