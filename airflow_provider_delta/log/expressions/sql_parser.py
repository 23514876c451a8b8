"""A parser for the part of Spark SQL's expression grammar that table rules and filters use.

Delta Spark stores CHECK constraints (``delta.constraints.<name>``), column invariants and generation
expressions as Spark SQL text; readers may filter with SQL text too. This parses that text into the tree of
``expressions``: comparisons (also ``<=>``), AND/OR/NOT, IS [NOT] NULL, [NOT] IN, [NOT] BETWEEN, [NOT] LIKE,
arithmetic, ``||``, CASE WHEN, CAST and the functions ``evaluate`` implements. Anything else raises
:class:`UnsupportedExpressionError` naming the construct, so that a rule we cannot evaluate is refused,
never skipped. Precedence follows Spark's grammar (``SqlBaseParser.g4``): OR < AND < NOT < comparison <
``||`` < ``+ -`` < ``* / %`` < unary minus.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pyarrow as pa

from ..base.errors import UnsupportedFeatureError
from ..schema.partition_values import parse_timestamp
from ..schema.schema import decimal_params
from .expressions import Call, Column, Expr, Literal, conjunction, literal

# Functions the evaluator implements, with how many arguments each takes (None: any number >= 1).
FUNCTIONS = {
    "lower": 1, "lcase": 1, "upper": 1, "ucase": 1, "length": 1, "char_length": 1, "character_length": 1,
    "abs": 1, "coalesce": None, "year": 1, "month": 1, "day": 1, "dayofmonth": 1, "hour": 1, "minute": 1,
    "second": 1, "to_date": 1, "concat": None, "trim": 1, "ltrim": 1, "rtrim": 1, "substring": (2, 3),
    "substr": (2, 3), "isnull": 1, "isnotnull": 1, "nvl": 2, "ifnull": 2, "if": 3, "greatest": None,
    "least": None, "startswith": 2, "endswith": 2, "contains": 2,
}  # fmt: skip
ALIASES = {"lcase": "lower", "ucase": "upper", "char_length": "length", "character_length": "length",
           "dayofmonth": "day", "substr": "substring", "nvl": "coalesce", "ifnull": "coalesce"}  # fmt: skip
CAST_TYPES = {
    "string": "string", "varchar": "string", "char": "string", "int": "integer", "integer": "integer",
    "bigint": "long", "long": "long", "smallint": "short", "short": "short", "tinyint": "byte",
    "byte": "byte", "double": "double", "float": "float", "real": "float", "boolean": "boolean",
    "date": "date", "timestamp": "timestamp", "timestamp_ntz": "timestamp_ntz", "timestamp_ltz": "timestamp",
    "binary": "binary",
}  # fmt: skip

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[LSYDBlsydb]?|\.\d+(?:[eE][+-]?\d+)?)"
    r"|(?P<str>'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\")|(?P<quoted>`(?:[^`]|``)*`)"
    r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<op><=>|<>|!=|==|<=|>=|\|\||[-+*/%<>=(),.!]))"
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "b": "\b", "Z": "\x1a"}


class UnsupportedExpressionError(UnsupportedFeatureError):
    """A SQL expression uses a construct this implementation cannot evaluate without Spark; the message
    names the construct (and, when the caller says, the rule that holds it)."""


def parse(text: str) -> Expr:
    """The tree of a Spark SQL expression; :class:`UnsupportedExpressionError` names what is outside the
    supported subset (or where the text is not SQL)."""
    parser = _Parser(text)
    expr = parser.expression()
    if parser.peek() is not None:
        raise parser.error(f"unexpected {parser.peek()[1]!r}")
    return expr


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                if text[pos:].strip() == "":
                    break
                raise UnsupportedExpressionError(f"cannot read {text[pos : pos + 20]!r} in SQL {text!r}")
            kind = m.lastgroup
            if kind is None:
                break
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def error(self, what: str) -> UnsupportedExpressionError:
        return UnsupportedExpressionError(f"{what} in SQL expression {self.text!r}")

    def peek(self, ahead: int = 0) -> tuple[str, str] | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def keyword(self, *words: str) -> bool:
        """Consume the keywords if they come next (case-insensitively)."""
        for k, word in enumerate(words):
            token = self.peek(k)
            if token is None or token[0] != "name" or token[1].upper() != word:
                return False
        self.i += len(words)
        return True

    def op(self, *ops: str) -> str | None:
        token = self.peek()
        if token is not None and token[0] == "op" and token[1] in ops:
            self.i += 1
            return token[1]
        return None

    def expect(self, op: str) -> None:
        if self.op(op) is None:
            found = self.peek()
            raise self.error(f"expected {op!r}, found {found[1] if found else 'the end'!r}")

    # -- grammar, lowest precedence first ----------------------------------------------------------------
    def expression(self) -> Expr:
        left = self.conjunction()
        while self.keyword("OR"):
            left = Call("or", (left, self.conjunction()))
        return left

    def conjunction(self) -> Expr:
        left = self.negation()
        while self.keyword("AND"):
            left = Call("and", (left, self.negation()))
        return left

    def negation(self) -> Expr:
        if self.keyword("NOT") or self.op("!"):
            return Call("not", (self.negation(),))
        return self.predicate()

    def predicate(self) -> Expr:
        left = self.concat()
        if (op := self.op("=", "==", "!=", "<>", "<", "<=", ">", ">=", "<=>")) is not None:
            op = {"==": "=", "<>": "!="}.get(op, op)
            return Call(op, (left, self.concat()))
        if self.keyword("IS"):
            negate = self.keyword("NOT")
            if self.keyword("NULL"):
                return Call("is_not_null" if negate else "is_null", (left,))
            for word, value in (("TRUE", True), ("FALSE", False)):
                if self.keyword(word):
                    test = Call("<=>", (left, Literal(value, pa.bool_())))
                    return Call("not", (test,)) if negate else test
            if self.keyword("DISTINCT", "FROM"):
                test = Call("<=>", (left, self.concat()))
                return test if negate else Call("not", (test,))
            raise self.error("unsupported IS predicate")
        negate = self.keyword("NOT")
        if self.keyword("IN"):
            self.expect("(")
            if self.keyword("SELECT"):
                raise self.error("subqueries")
            items = [self.expression()]
            while self.op(","):
                items.append(self.expression())
            self.expect(")")
            result: Expr = Call("in", (left, *items))
        elif self.keyword("BETWEEN"):
            low = self.concat()
            if not self.keyword("AND"):
                raise self.error("BETWEEN without AND")
            result = conjunction([Call(">=", (left, low)), Call("<=", (left, self.concat()))])
        elif self.keyword("LIKE"):
            pattern = self.concat()
            escape = "\\"
            if self.keyword("ESCAPE"):
                token = self.peek()
                if token is None or token[0] != "str":
                    raise self.error("ESCAPE needs a string")
                self.i += 1
                escape = _unquote(token[1])
            result = Call("like", (left, pattern), escape)
        elif self.keyword("RLIKE") or self.keyword("REGEXP") or self.keyword("ILIKE"):
            raise self.error(f"the {self.tokens[self.i - 1][1].upper()} operator")
        else:
            if negate:
                raise self.error("NOT in an unexpected place")
            return left
        return Call("not", (result,)) if negate else result

    def concat(self) -> Expr:
        left = self.additive()
        while self.op("||"):
            left = Call("concat", (left, self.additive()))
        return left

    def additive(self) -> Expr:
        left = self.multiplicative()
        while (op := self.op("+", "-")) is not None:
            left = Call(op, (left, self.multiplicative()))
        return left

    def multiplicative(self) -> Expr:
        left = self.unary()
        while True:
            op = self.op("*", "/", "%")
            if op is None and self.keyword("DIV"):
                raise self.error("the DIV operator")
            if op is None:
                return left
            left = Call(op, (left, self.unary()))

    def unary(self) -> Expr:
        if self.op("-"):
            operand = self.unary()
            if isinstance(operand, Literal) and operand.value is not None:
                return literal(-operand.value, operand.type)
            return Call("negate", (operand,))
        if self.op("+"):
            return self.unary()
        return self.primary()

    def primary(self) -> Expr:
        token = self.peek()
        if token is None:
            raise self.error("unexpected end")
        kind, text = token
        self.i += 1
        if kind == "num":
            return _number(text, self)
        if kind == "str":
            return Literal(_unquote(text), pa.string())
        if kind == "op" and text == "(":
            inner = self.expression()
            self.expect(")")
            return inner
        if kind == "quoted":
            return self.column(text[1:-1].replace("``", "`"))
        if kind != "name":
            raise self.error(f"unexpected {text!r}")
        upper = text.upper()
        if upper in ("TRUE", "FALSE"):
            return Literal(upper == "TRUE", pa.bool_())
        if upper == "NULL":
            return Literal(None, pa.null())
        if upper in ("DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ") and self.peek() and \
                self.peek()[0] == "str":  # fmt: skip
            self.i += 1
            return _typed_literal(upper, _unquote(self.tokens[self.i - 1][1]), self)
        if upper == "CAST":
            return self.cast()
        if upper == "CASE":
            return self.case()
        if upper == "INTERVAL":
            raise self.error("INTERVAL literals")
        if self.peek() is not None and self.peek() == ("op", "("):
            return self.function(text)
        return self.column(text)

    def column(self, first: str) -> Expr:
        path = [first]
        while self.op("."):
            token = self.peek()
            if token is None or token[0] not in ("name", "quoted"):
                raise self.error("a '.' not followed by a field name")
            self.i += 1
            path.append(token[1][1:-1].replace("``", "`") if token[0] == "quoted" else token[1])
        return Column(tuple(path))

    def cast(self) -> Expr:
        self.expect("(")
        value = self.expression()
        if not self.keyword("AS"):
            raise self.error("CAST without AS")
        token = self.peek()
        if token is None or token[0] != "name":
            raise self.error("CAST without a type")
        self.i += 1
        name = token[1].lower()
        if name == "decimal" or name == "numeric":
            spec = "decimal"
            if self.op("("):
                precision = self.peek()[1]
                self.i += 1
                scale = "0"
                if self.op(","):
                    scale = self.peek()[1]
                    self.i += 1
                self.expect(")")
                spec = f"decimal({precision},{scale})"
            delta_type = spec
            decimal_params(delta_type)
        elif name in CAST_TYPES:
            delta_type = CAST_TYPES[name]
            if name in ("varchar", "char") and self.op("("):
                raise self.error(f"CAST to {name.upper()}(n)")
        else:
            raise self.error(f"CAST to {name.upper()}")
        self.expect(")")
        return Call("cast", (value,), delta_type)

    def case(self) -> Expr:
        subject = None if self.peek() and self.peek()[1].upper() == "WHEN" else self.expression()
        branches: list[Expr] = []
        while self.keyword("WHEN"):
            condition = self.expression()
            if subject is not None:
                condition = Call("=", (subject, condition))
            if not self.keyword("THEN"):
                raise self.error("WHEN without THEN")
            branches += [condition, self.expression()]
        if not branches:
            raise self.error("CASE without WHEN")
        otherwise = self.expression() if self.keyword("ELSE") else Literal(None, pa.null())
        if not self.keyword("END"):
            raise self.error("CASE without END")
        return Call("case", (*branches, otherwise))

    def function(self, name: str) -> Expr:
        lower = name.lower()
        if lower not in FUNCTIONS:
            raise self.error(f"the function {name}()")
        self.expect("(")
        args: list[Expr] = []
        if not self.op(")"):
            args.append(self.expression())
            while self.op(","):
                args.append(self.expression())
            self.expect(")")
        arity = FUNCTIONS[lower]
        ok = len(args) >= 1 if arity is None else (len(args) in arity if isinstance(arity, tuple)
                                                    else len(args) == arity)  # fmt: skip
        if not ok:
            raise self.error(f"{name}() with {len(args)} argument(s)")
        lower = ALIASES.get(lower, lower)
        if lower == "isnull":
            return Call("is_null", tuple(args))
        if lower == "isnotnull":
            return Call("is_not_null", tuple(args))
        return Call(lower, tuple(args))


def _unquote(token: str) -> str:
    body = token[1:-1]
    if token[0] == "'":
        body = body.replace("''", "'")
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m[1], m[1]), body)


def _number(text: str, parser: _Parser) -> Literal:
    suffix = text[-1].upper() if text[-1].isalpha() and text[-1].upper() in "LSYDB" else ""
    body = text[:-1] if suffix else text
    if suffix == "D" or "e" in body.lower():
        return Literal(float(body), pa.float64())
    if suffix == "B":  # BD: decimal
        raise parser.error("BD literals")
    if "." in body:
        value = Decimal(body)
        return literal(value)
    number = int(body)
    types = {"L": pa.int64(), "S": pa.int16(), "Y": pa.int8()}
    if suffix in types:
        return Literal(number, types[suffix])
    if number >= 2**63:
        return literal(Decimal(number))
    return literal(number)


def _typed_literal(kind: str, text: str, parser: _Parser) -> Literal:
    try:
        if kind == "DATE":
            return Literal(dt.date.fromisoformat(text.strip()), pa.date32())
        ntz = kind == "TIMESTAMP_NTZ"
        value = parse_timestamp(text, ntz=ntz)
        return Literal(value, pa.timestamp("us") if ntz else pa.timestamp("us", tz="UTC"))
    except ValueError as exc:
        raise parser.error(f"the {kind} literal {text!r} ({exc})") from None
