"""ORM queries compiled to SQL once per database connection, then run with new values.

Compiling a queryset costs milliseconds of Python when it has subqueries, as the access
helper's do, and a prompt's start ran several: the socket's credential check, the claim's
access lookup. Under a burst of prompts that compilation was the largest part of the
server's CPU (py-spy: the credential check alone held the GIL 39% of the time). A
``Prepared`` query stays an ordinary queryset, written once where its rule lives: a
function builds it from its arguments. It is called once per connection with marker
values; the SQL is kept with, for each parameter, either a constant or the argument it
came from (converted as Django converted the marker, e.g. a UUID to its hex on SQLite).
Each later call only swaps in the values, executes, and reads the rows as the queryset
would have (the same compiler's converters, select_related and annotations).

A builder must compile to the same SQL whatever its values (no ``None`` that would turn
``=`` into ``IS NULL``, no value choosing a branch): ``Prepared`` checks that every marker
reached the parameters, and the tests compare each prepared query with its queryset.
"""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import QuerySet
from django.db.models.query import get_related_populators

# Marker values: none of them is a value a query of this project holds. Integers stay in
# the range of a positive 32-bit column (Django turns a lookup past a field's range into an
# empty result), far apart: a value computed from one (``window - 1``) is caught.
_INT_BASE = 1_987_654_321
_INT_STEP = 1_003
_UUID_BASE = 0x5EED_C0DE_0000_0000_0000_0000_0000_0000
_DATETIME = datetime.datetime(1901, 2, 3, 4, 5, 6, tzinfo=datetime.UTC)


def _marker(kind: type, index: int):
    if kind is int:
        return _INT_BASE - index * _INT_STEP
    if kind is uuid.UUID:
        return uuid.UUID(int=_UUID_BASE + index)
    if kind is str:
        return f"\x1fprepared-{index}\x1f"
    if kind is datetime.datetime:
        return _DATETIME + datetime.timedelta(microseconds=index + 1)
    raise TypeError(f"no marker for {kind.__name__}")


def _derived(param) -> bool:
    """A constant that looks computed from a marker: the builder did arithmetic on an
    argument, which a plan would freeze (pass the computed value as an argument)."""
    if isinstance(param, int) and not isinstance(param, bool):
        return abs(param - _INT_BASE) < 1_000 * _INT_STEP
    if isinstance(param, str):
        return "\x1fprepared-" in param or param.startswith("1901-")
    if isinstance(param, datetime.datetime):
        return param.year == 1901
    if isinstance(param, uuid.UUID):
        return param.int >> 64 == _UUID_BASE >> 64
    return False


def _uuid(value) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _forms(kind: type, connection) -> tuple[Callable[[Any], Any], ...]:
    """How Django may have converted an argument of ``kind`` into a parameter."""
    if kind is uuid.UUID:  # (a UUID given as text is read as one)
        return (_uuid, lambda value: _uuid(value).hex)
    if kind is datetime.datetime:
        return (lambda value: value, connection.ops.adapt_datetimefield_value)
    return (lambda value: value,)


def _rewrapped(form: Callable, made: type, wanted: type) -> Callable:
    """``form``, its result then wrapped as Django wrapped the marker's (psycopg's
    ``Int8`` around an integer in a ``CASE`` on PostgreSQL)."""
    return form if made is wanted else (lambda value: wanted(form(value)))


@dataclass(frozen=True)
class _Plan:
    sql: str
    # Per parameter: (argument, its form) or (None, a constant).
    slots: tuple[tuple[int, Callable] | tuple[None, Any], ...]
    compiler: Any  # the compiler that made the SQL: it reads the rows


# Plans per thread, as Django's connections are: a plan's compiler holds its connection,
# so the plans go with the thread (a module-wide table would keep every dead request
# thread's connection open: PostgreSQL ran out of connections).
_local = threading.local()


class Prepared:
    """``build(*arguments) -> QuerySet`` compiled once per connection. ``kinds``: each
    argument's type (int, str, uuid.UUID, datetime.datetime)."""

    def __init__(self, build: Callable[..., QuerySet], *kinds: type, using: str = "default"):
        self.build, self.kinds, self.using = build, kinds, using

    def _plan(self, connection) -> _Plan:
        plans = _local.__dict__.setdefault("plans", {})
        plan = plans.get(self)
        if plan is None or plan.compiler.connection is not connection:
            plan = plans[self] = self._compile(connection)
        return plan

    def _compile(self, connection) -> _Plan:
        markers = [_marker(kind, i) for i, kind in enumerate(self.kinds)]
        compiler = self._compiler(markers)
        sql, params = compiler.as_sql()
        candidates = [
            (i, form, form(marker))
            for i, (kind, marker) in enumerate(zip(self.kinds, markers, strict=True))
            for form in _forms(kind, connection)
        ]
        slots, used = [], set()
        for param in params:
            match = next(
                ((i, _rewrapped(form, type(converted), type(param)))
                 for i, form, converted in candidates
                 if isinstance(param, type(converted)) and converted == param),
                None,
            )  # fmt: skip
            if match is None:
                if _derived(param):
                    raise ValueError(f"{self.build.__qualname__}: a parameter ({param!r}) is "
                                     "computed from an argument; pass it as one")  # fmt: skip
                slots.append((None, param))
            else:
                slots.append(match)
                used.add(match[0])
        unused = set(range(len(markers))) - used
        inlined = [str(marker) for marker in markers if str(marker) in sql]
        if unused or inlined:
            raise ValueError(
                f"{self.build.__qualname__}: arguments {sorted(unused)} are not parameters of "
                f"its SQL{' (written into it)' if inlined else ''}; it cannot be prepared"
            )
        return _Plan(sql, tuple(slots), compiler)

    def _compiler(self, markers: list) -> Any:
        return self.build(*markers).query.get_compiler(using=self.using)

    def _run(self, arguments, read) -> tuple[_Plan, Any]:
        if len(arguments) != len(self.kinds):
            raise TypeError(f"{len(self.kinds)} arguments expected, got {len(arguments)}")
        connection = connections[self.using]
        plan = self._plan(connection)
        params = [form(arguments[i]) if i is not None else form for i, form in plan.slots]
        with connection.cursor() as cursor:
            cursor.execute(plan.sql, params)
            return plan, read(cursor)

    def _execute(self, arguments) -> tuple[_Plan, list]:
        plan, rows = self._run(arguments, lambda cursor: cursor.fetchall())
        return plan, list(plan.compiler.results_iter([rows]))

    def values(self, *arguments) -> list[tuple]:
        """The rows of a ``values_list`` queryset, as it gives them (the compiler selects
        its columns in the order asked for)."""
        plan, rows = self._execute(arguments)
        return [tuple(row) for row in rows]

    def objects(self, *arguments) -> list:
        """The model instances of a queryset, with its ``select_related`` objects and its
        annotations, as ``ModelIterable`` builds them."""
        plan, rows = self._execute(arguments)
        compiler, db = plan.compiler, self.using
        select, info = compiler.select, compiler.klass_info
        annotations = compiler.annotation_col_map
        start, end = info["select_fields"][0], info["select_fields"][-1] + 1
        names = [column[0].target.attname for column in select[start:end]]
        related = get_related_populators(info, select, db)
        found = []
        for row in rows:
            obj = info["model"].from_db(db, names, row[start:end])
            for populator in related:
                populator.populate(row, obj)
            for name, position in (annotations or {}).items():
                setattr(obj, name, row[position])
            found.append(obj)
        return found


class PreparedUpdate(Prepared):
    """``build(*arguments) -> (QuerySet, {field: value})``: that queryset's ``update()``,
    compiled once per connection. A field's value may be an argument, a constant or an
    expression of them (``Case``, ``F``), never a value computed from an argument."""

    def _compiler(self, markers: list) -> Any:
        from django.db.models.sql import UpdateQuery

        queryset, values = self.build(*markers)
        query = queryset.query.chain(UpdateQuery)
        query.add_update_values(values)
        if query.related_updates:
            raise ValueError(f"{self.build.__qualname__}: updates another table")
        return query.get_compiler(using=self.using)

    def __call__(self, *arguments) -> int:
        """Run it: the number of rows it changed."""
        return self._run(arguments, lambda cursor: cursor.rowcount)[1]


def insert_rows(model, rows: list[dict[str, Any]]) -> None:
    """Rows of ``model`` (each a dict of the same fields' values) in one executemany
    INSERT, each value prepared by its field as ``bulk_create`` would; fields with
    ``auto_now_add`` get the time now. ``bulk_create``'s per-row Python (instances,
    ``pre_save``, the insert compiler) was most of the event log's time per batch."""
    if not rows:
        return
    from django.utils import timezone

    connection = connections[model.objects.db]
    names = list(rows[0])
    fields = [model._meta.get_field(name) for name in names]
    stamped = [field for field in model._meta.concrete_fields
               if getattr(field, "auto_now_add", False) and field.name not in names]  # fmt: skip
    now = timezone.now()
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in [*fields, *stamped])
    marks = ", ".join(["%s"] * (len(fields) + len(stamped)))
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})"
    stamps = [field.get_db_prep_save(now, connection) for field in stamped]
    values = [[*(field.get_db_prep_save(row[name], connection)
                 for field, name in zip(fields, names, strict=True)), *stamps]
              for row in rows]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)


def update_row(model, pk, values: dict[str, Any], added: dict[str, Any] | None = None) -> int:
    """``model.objects.filter(pk=pk).update(**values)``, and ``field = field + amount`` for
    each of ``added``, as one hand-built UPDATE: the number of rows changed."""
    connection = connections[model.objects.db]
    quote = connection.ops.quote_name
    sets, params = [], []
    for name, value in values.items():
        field = model._meta.get_field(name)
        sets.append(f"{quote(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    for name, amount in (added or {}).items():
        field = model._meta.get_field(name)
        column = quote(field.column)
        sets.append(f"{column} = {column} + %s")
        params.append(field.get_db_prep_save(amount, connection))
    key = model._meta.pk
    table = quote(model._meta.db_table)
    sql = f"UPDATE {table} SET {', '.join(sets)} WHERE {quote(key.column)} = %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, key.get_db_prep_value(pk, connection)])
        return cursor.rowcount
