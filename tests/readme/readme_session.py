"""README.md as a session: its blocks in order, what each prints, and the comparison.

The README's conventions, which `parse` enforces:
- A ```sh block runs in one bash session (state such as `cd` or an activated
  virtualenv carries over); a ```python block is a script run with `python -`
  in that session's current directory.
- A ```text block directly after one of those (blank lines between at most)
  is what it prints on standard output. A block with none prints nothing.
- `<!-- not run: reason -->` on the line before a fence (blank lines between
  at most) marks a block that is shown but not run: `make run` itself, an
  alternative to it. Only those are skipped, and they may have no output.
- Any other fence (another language, a ```text block after prose) is an error,
  so a block cannot drop out of the session unnoticed.

In an expected output, lines are compared with runs of blanks folded into one
space (the tables align with tabs or spaces) and blank lines at the end
dropped; `...` on a line of its own stands for any number of lines, `...`
within a line for any text on it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

FENCE = re.compile(r"^```(\S*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.+?)\s*-->\s*$")
RUNNABLE = ("sh", "python")
ELLIPSIS = "..."


@dataclass(frozen=True)
class Block:
    """One fenced block of the README that the session runs or skips."""

    language: str
    code: str
    line: int                  # 1-based line of the opening fence
    expected: str | None       # the ```text block after it; None: it prints nothing
    not_run: str | None        # the reason it is skipped, or None


def parse(text: str) -> list[Block]:
    """The README's runnable and not-run blocks in order, each with its expected output."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pending_reason: str | None = None   # a `not run` marker waiting for its fence
    previous_ends_block = False          # only blank lines since the last block closed
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if not fence:
            marker = NOT_RUN.match(line)
            if marker:
                pending_reason = marker.group(1)
            elif line.strip():
                if pending_reason is not None:
                    raise ValueError(f"README line {i}: a `not run` marker followed by text, not a block")
                previous_ends_block = False
            i += 1
            continue
        language, start = fence.group(1), i
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"README line {start + 1}: a ``` fence that never closes")
        body = "\n".join(lines[start + 1:end]) + "\n"
        if language == "text":
            if pending_reason is not None or not previous_ends_block or not blocks \
                    or blocks[-1].not_run is not None or blocks[-1].expected is not None:
                raise ValueError(f"README line {start + 1}: a ```text block that is not the output of "
                                 f"the block that runs right before it")
            last = blocks[-1]
            blocks[-1] = Block(last.language, last.code, last.line, body, None)
            previous_ends_block = False
        elif language in RUNNABLE or pending_reason is not None:
            blocks.append(Block(language, body, start + 1, None, pending_reason))
            previous_ends_block = True
        else:
            raise ValueError(f"README line {start + 1}: a ```{language} block, neither run (sh, python) "
                             f"nor marked <!-- not run: reason -->")
        pending_reason = None
        i = end + 1
    if pending_reason is not None:
        raise ValueError("README: a `not run` marker at the end, with no block after it")
    return blocks


def normalize(output: str) -> list[str]:
    """Lines with runs of blanks folded into one space, trailing blank lines dropped."""
    folded = [" ".join(line.split()) for line in output.splitlines()]
    while folded and not folded[-1]:
        folded.pop()
    return folded


def pattern(expected: str) -> re.Pattern:
    """A regular expression for the normalized output that `expected` shows."""
    parts = []
    for line in normalize(expected):
        if line == ELLIPSIS:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*?".join(re.escape(piece) for piece in line.split(ELLIPSIS)) + r"\n")
    return re.compile("".join(parts))


def matches(expected: str | None, output: str) -> bool:
    """Whether `output` is what `expected` shows (None: nothing at all)."""
    actual = "".join(line + "\n" for line in normalize(output))
    if expected is None:
        return actual == ""
    return pattern(expected).fullmatch(actual) is not None
