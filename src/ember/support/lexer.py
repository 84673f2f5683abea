"""A small lexer shared by the text parsers of both IRs.

Tokens: local names (%x, %"any text"), global names (@w, @"any text"), identifiers,
numbers (including inf/nan), JSON strings and punctuation. '#' starts a comment."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ember.support.errors import ParseError

_BARE_NAME = r"[A-Za-z0-9_.]+"
_STRING = r'"(?:[^"\\\n]|\\.)*"'
_TOKEN = re.compile(
    rf"""
    (?P<space>[ \t\r]+)
  | (?P<newline>\n)
  | (?P<comment>\#[^\n]*)
  | (?P<local>%(?:{_BARE_NAME}|{_STRING}))
  | (?P<global>@(?:{_BARE_NAME}|{_STRING}))
  | (?P<number>-?(?:(?:inf|nan)\b|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<string>{_STRING})
  | (?P<arrow>->)
  | (?P<punct>[()\[\]{{}},=:;])
    """,
    re.VERBOSE,
)
_SAFE_NAME = re.compile(rf"^{_BARE_NAME}$")


def quote_name(name: str) -> str:
    """The text form of a value name: bare when safe, else a JSON string."""
    return name if _SAFE_NAME.match(name) else json.dumps(name)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    line: int

    @property
    def name(self) -> str:
        """For local/global tokens: the name without sigil and quotes."""
        body = self.text[1:]
        return json.loads(body) if body.startswith('"') else body


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    line = 1
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise ParseError(f"unexpected character {text[pos]!r}", line)
        kind = match.lastgroup or ""
        if kind == "newline":
            line += 1
        elif kind not in ("space", "comment"):
            tokens.append(Token(kind, match.group(), line))
        pos = match.end()
    tokens.append(Token("eof", "", line))
    return tokens


class TokenStream:
    """Cursor over tokens with the expect/accept helpers recursive-descent parsers need."""

    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.pos = 0

    @property
    def peek(self) -> Token:
        return self.tokens[self.pos]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind != "eof":
            self.pos += 1
        return token

    def error(self, message: str) -> ParseError:
        token = self.peek
        found = token.text or "end of input"
        return ParseError(f"{message}, found '{found}'", token.line)

    def accept(self, text: str) -> bool:
        if self.peek.text == text and self.peek.kind in ("punct", "ident", "arrow"):
            self.pos += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        token = self.peek
        if not self.accept(text):
            raise self.error(f"expected '{text}'")
        return token

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.peek.kind != kind:
            raise self.error(f"expected {what}")
        return self.next()
