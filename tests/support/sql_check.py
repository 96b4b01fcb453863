"""What a statement must be to run on one shard of a distributed PostgreSQL (app/db/distribution.py),
checked on PostgreSQL's own parse tree (pglast: libpg_query), so a comment or a string holding
`user_id = $1` counts for nothing:

- every wallet-owned table a SELECT, UPDATE or DELETE reads is filtered by its wallet column:
  an equality with a parameter (or with a column already so filtered) among the AND-ed
  conditions of its WHERE or JOIN, never under an OR or a NOT;
- an INSERT into one gives the wallet column a parameter;
- that parameter, in the run that recorded the statement, held a wallet address;
- no ON CONFLICT DO UPDATE calls a function that is not IMMUTABLE (Citus refuses them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pglast import ast, parse_sql
from pglast.enums import A_Expr_Kind, BoolExprType, OnConflictAction

from app.auth.signature import ADDRESS_RE
from app.db.distribution import BY_OTHER, BY_WALLET

DISTRIBUTED = {**BY_WALLET, **BY_OTHER}


def children(node: Any) -> Iterator[Any]:
    if isinstance(node, list | tuple):
        for item in node:
            yield from children(item)
    elif isinstance(node, ast.Node):
        yield node
        for name in node:
            yield from children(getattr(node, name))


def _conjuncts(expr: Any) -> Iterator[Any]:
    """The AND-ed conditions of an expression (not those under an OR or a NOT)."""
    if expr is None:
        return
    if isinstance(expr, ast.BoolExpr) and expr.boolop == BoolExprType.AND_EXPR:
        for arg in expr.args:
            yield from _conjuncts(arg)
    else:
        yield expr


def _param(expr: Any) -> int | None:
    while isinstance(expr, ast.TypeCast):
        expr = expr.arg
    return expr.number if isinstance(expr, ast.ParamRef) else None


def _column(expr: Any) -> tuple[str | None, str] | None:
    if isinstance(expr, ast.ColumnRef) and all(isinstance(f, ast.String) for f in expr.fields):
        names = [f.sval for f in expr.fields]
        return (None, names[0]) if len(names) == 1 else (names[-2], names[-1])
    return None


def _tables(from_items: Any) -> Iterator[ast.RangeVar]:
    """The tables read at this level of a statement (not inside subqueries)."""
    for item in from_items or ():
        if isinstance(item, ast.RangeVar):
            yield item
        elif isinstance(item, ast.JoinExpr):
            yield from _tables([item.larg, item.rarg])


def _join_quals(from_items: Any) -> Iterator[Any]:
    for item in from_items or ():
        if isinstance(item, ast.JoinExpr):
            yield from _conjuncts(item.quals)
            yield from _join_quals([item.larg, item.rarg])


class Problems:
    def __init__(self, args: Sequence[Any]) -> None:
        self.args = args
        self.found: list[str] = []

    def wallet_param(self, number: int, table: str) -> None:
        if table not in BY_WALLET:
            return
        value = self.args[number - 1] if 0 < number <= len(self.args) else None
        if not (isinstance(value, str) and ADDRESS_RE.match(value) and value == value.lower()):
            self.found.append(f"{table}: ${number} held {value!r}, not a wallet address")


def _check_level(
    tables: list[ast.RangeVar], conditions: list[Any], problems: Problems, what: str
) -> None:
    owned = [t for t in tables if t.relname in DISTRIBUTED]
    if not owned:
        return
    names = {(t.alias.aliasname if t.alias else t.relname): t for t in tables}
    sole = tables[0] if len(tables) == 1 else None

    def table_of(ref: tuple[str | None, str]) -> ast.RangeVar | None:
        alias, column = ref
        table = names.get(alias) if alias is not None else sole
        return table if table is not None and DISTRIBUTED.get(table.relname) == column else None

    filtered: set[int] = set()
    equalities = []
    for cond in conditions:
        if (
            isinstance(cond, ast.A_Expr)
            and cond.kind == A_Expr_Kind.AEXPR_OP
            and [n.sval for n in cond.name] == ["="]
        ):
            equalities.append((cond.lexpr, cond.rexpr))
    for _ in range(len(equalities) + 1):  # column = column chains, to a fixed point
        for left, right in equalities:
            for a, b in ((left, right), (right, left)):
                ref = _column(a)
                table = table_of(ref) if ref else None
                if table is None or id(table) in filtered:
                    continue
                number = _param(b)
                other = _column(b)
                other_table = table_of(other) if other else None
                if number is not None:
                    problems.wallet_param(number, table.relname)
                    filtered.add(id(table))
                elif other_table is not None and id(other_table) in filtered:
                    filtered.add(id(table))
    for table in owned:
        if id(table) not in filtered:
            column = DISTRIBUTED[table.relname]
            problems.found.append(f"{what} reads {table.relname} without `{column} = $n`")


def _check_insert(stmt: ast.InsertStmt, problems: Problems) -> None:
    table = stmt.relation.relname
    column = DISTRIBUTED.get(table)
    if column is None:
        return
    names = [c.name for c in stmt.cols or ()]
    if column not in names:
        problems.found.append(f"INSERT INTO {table} does not set {column}")
        return
    at = names.index(column)
    select = stmt.selectStmt
    if select is None:
        problems.found.append(f"INSERT INTO {table} without values")
        return
    rows = [row[at] for row in select.valuesLists] if select.valuesLists else None
    values = rows if rows is not None else [select.targetList[at].val]
    for value in values:
        number = _param(value)
        if number is None:
            problems.found.append(f"INSERT INTO {table} sets {column} from no parameter")
        else:
            problems.wallet_param(number, table)


def _check_on_conflict(
    stmt: ast.InsertStmt, volatility: Mapping[str, str], problems: Problems
) -> None:
    clause = stmt.onConflictClause
    if clause is None or clause.action != OnConflictAction.ONCONFLICT_UPDATE:
        return
    for node in children([clause.targetList, clause.whereClause]):
        if isinstance(node, ast.SQLValueFunction):
            problems.found.append("ON CONFLICT DO UPDATE uses a time function (not IMMUTABLE)")
        elif isinstance(node, ast.FuncCall):
            name = node.funcname[-1].sval
            if volatility.get(name, "v") != "i":
                problems.found.append(f"ON CONFLICT DO UPDATE calls {name}() (not IMMUTABLE)")


def problems_of(query: str, args: Sequence[Any], volatility: Mapping[str, str]) -> list[str]:
    """What keeps `query`, run with `args`, from one shard. `volatility`: pg_proc's provolatile
    by function name ('i' immutable)."""
    problems = Problems(args)
    for raw in parse_sql(query):
        for node in children(raw.stmt):
            if isinstance(node, ast.SelectStmt):
                conditions = [*_conjuncts(node.whereClause), *_join_quals(node.fromClause)]
                _check_level(list(_tables(node.fromClause)), conditions, problems, "SELECT")
            elif isinstance(node, ast.UpdateStmt):
                tables = [node.relation, *_tables(node.fromClause)]
                conditions = [*_conjuncts(node.whereClause), *_join_quals(node.fromClause)]
                _check_level(tables, conditions, problems, "UPDATE")
            elif isinstance(node, ast.DeleteStmt):
                tables = [node.relation, *_tables(node.usingClause)]
                conditions = [*_conjuncts(node.whereClause), *_join_quals(node.usingClause)]
                _check_level(tables, conditions, problems, "DELETE")
            elif isinstance(node, ast.InsertStmt):
                _check_insert(node, problems)
                _check_on_conflict(node, volatility, problems)
    return problems.found


VOLATILITY_SQL = "SELECT proname, max(provolatile::text) FROM pg_proc GROUP BY proname"
