"""The rules of the architecture (docs/explanation/architecture.md, "The rules the tests
enforce"), checked on the source with ``ast``.

* Adapters and loops (``api``, ``admin``, ``management``, ``worker``, ``reaper``,
  ``queues``) use the ``django_ojs.lifecycle`` facade only: never one of its modules, never
  ``django_ojs.drivers``.
* No module imports a private (``_name``) name from another module.
* ``models`` imports nothing from the layers above it.
* The OJS rules stand alone: the pure modules (:data:`PURE`: states, the envelope,
  retry, schedule, unique, rate limits, policy, validation, ids, exceptions, failure,
  tenancy)
  import only each other, ``conf`` and ``types`` of django-ojs, and nothing of
  ``django.db``: no model, no database, no HTTP.
* Only the drivers know the database: no module outside ``django_ojs.drivers`` (and the
  migrations, which Django runs per vendor) reads a connection's ``vendor`` or runs SQL of
  its own (``cursor()``, ``raw()``, ``RawSQL``, ``extra()``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "django_ojs"


def facade_exports() -> frozenset[str]:
    tree = ast.parse((PACKAGE / "lifecycle" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    raise AssertionError("django_ojs/lifecycle/__init__.py has no __all__")


#: Names of lifecycle's modules that the facade does not shadow with an export of its own
#: (``lifecycle.push`` is the function, ``lifecycle.store`` would be the module).
LIFECYCLE_MODULES = (
    frozenset(p.stem for p in (PACKAGE / "lifecycle").glob("*.py") if p.stem != "__init__")
    | frozenset(p.parent.name for p in (PACKAGE / "lifecycle").glob("*/__init__.py"))
) - facade_exports()
ADAPTERS = ("django_ojs.api", "django_ojs.admin", "django_ojs.management", "django_ojs.worker")
ADAPTER_MODULES = ("django_ojs.reaper", "django_ojs.queues")
ABOVE_MODELS = (
    "django_ojs.lifecycle",
    "django_ojs.drivers",
    "django_ojs.api",
    "django_ojs.admin",
    "django_ojs.worker",
)


@dataclass(frozen=True)
class Import:
    module: str  # the module imported from (absolute)
    name: str | None  # the name imported from it (``from module import name``), if any
    line: int

    def __str__(self) -> str:
        target = f"from {self.module} import {self.name}" if self.name else f"import {self.module}"
        return f"line {self.line}: {target}"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[Import]:
    """Every import in the file (also inside functions and ``TYPE_CHECKING`` blocks)."""
    name = module_name(path)
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.extend(Import(alias.name, None, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.extend(Import(base, alias.name, node.lineno) for alias in node.names)
    return out


def lifecycle_attributes(path: Path) -> list[str]:
    """``lifecycle.<module>.x`` reached through the facade's attributes."""
    return [
        f"line {node.lineno}: lifecycle.{node.attr}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "lifecycle"
        and node.attr in LIFECYCLE_MODULES
    ]


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


MODULES = sorted(PACKAGE.rglob("*.py"))


def is_adapter(path: Path) -> bool:
    name = module_name(path)
    return name in ADAPTER_MODULES or any(within(name, p) for p in ADAPTERS)


def adapter_params():
    for path in MODULES:
        if is_adapter(path):
            yield pytest.param(path, id=module_name(path))


@pytest.mark.parametrize("path", list(adapter_params()))
def test_adapters_use_the_lifecycle_facade_only(path: Path):
    bad = []
    for imp in imports(path):
        full = f"{imp.module}.{imp.name}" if imp.name else imp.module
        reaches_module = within(imp.module, "django_ojs.lifecycle") and (
            imp.module != "django_ojs.lifecycle" or imp.name in LIFECYCLE_MODULES
        )
        reaches_drivers = within(full, "django_ojs.drivers")
        if reaches_module or reaches_drivers:
            bad.append(str(imp))
    bad.extend(lifecycle_attributes(path))
    assert not bad, f"{module_name(path)} must use django_ojs.lifecycle only: {bad}"


@pytest.mark.parametrize("path", MODULES, ids=[module_name(p) for p in MODULES])
def test_no_private_names_imported_from_another_module(path: Path):
    bad = [
        str(imp)
        for imp in imports(path)
        if imp.module != module_name(path)
        and within(imp.module, "django_ojs")  # our modules; stubs' private types are theirs
        and any(
            part.startswith("_") and not part.startswith("__")
            for part in [*imp.module.split("."), *([imp.name] if imp.name else [])]
        )
    ]
    assert not bad, f"{module_name(path)} imports private names: {bad}"


@pytest.mark.parametrize(
    "path",
    sorted((PACKAGE / "models").glob("*.py")),
    ids=lambda p: module_name(p),
)
def test_models_import_nothing_from_the_layers_above(path: Path):
    bad = [
        str(imp)
        for imp in imports(path)
        if any(
            within(imp.module, layer)
            or (imp.module == "django_ojs" and f"django_ojs.{imp.name}" == layer)
            for layer in ABOVE_MODELS
        )
    ]
    assert not bad, f"{module_name(path)} imports from above it: {bad}"


#: The pure OJS rules (rule 4 of architecture.md), and what else of django-ojs they may use.
PURE = (
    "django_ojs.states",
    "django_ojs.envelope",
    "django_ojs.retry",
    "django_ojs.schedule",
    "django_ojs.unique",
    "django_ojs.ratelimit",
    "django_ojs.policy",
    "django_ojs.validation",
    "django_ojs.ids",
    "django_ojs.exceptions",
    "django_ojs.failure",
    "django_ojs.scheduling",
    "django_ojs.tenancy",
)
PURE_MAY_USE = (*PURE, "django_ojs.conf", "django_ojs.types")


def pure_params():
    for path in MODULES:
        if any(within(module_name(path), p) for p in PURE):
            yield pytest.param(path, id=module_name(path))


@pytest.mark.parametrize("path", list(pure_params()))
def test_the_ojs_rules_use_no_database_and_no_layer_above(path: Path):
    bad = []
    for imp in imports(path):
        full = f"{imp.module}.{imp.name}" if imp.name else imp.module
        ours = within(imp.module, "django_ojs")
        if ours and not any(within(full, p) or within(imp.module, p) for p in PURE_MAY_USE):
            bad.append(str(imp))
        if within(imp.module, "django.db"):
            bad.append(str(imp))
    assert not bad, f"{module_name(path)} is one of the pure OJS rules: {bad}"


#: Calls and names that run SQL written by hand.
RAW_SQL_CALLS = frozenset({"cursor", "raw", "extra"})
RAW_SQL_NAMES = frozenset({"RawSQL"})


def vendor_knowledge(path: Path) -> list[str]:
    """Where ``path`` reads a connection's vendor or runs SQL of its own."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "vendor":
            out.append(f"line {node.lineno}: .vendor")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in RAW_SQL_CALLS
        ):
            out.append(f"line {node.lineno}: .{node.func.attr}()")
        elif isinstance(node, ast.Name) and node.id in RAW_SQL_NAMES:
            out.append(f"line {node.lineno}: {node.id}")
    return out


def outside_drivers():
    for path in MODULES:
        name = module_name(path)
        if not within(name, "django_ojs.drivers") and not within(name, "django_ojs.migrations"):
            yield pytest.param(path, id=name)


@pytest.mark.parametrize("path", list(outside_drivers()))
def test_only_the_drivers_know_the_database(path: Path):
    bad = vendor_knowledge(path)
    assert not bad, (
        f"{module_name(path)} reads the database vendor or runs SQL of its own: {bad}; "
        "declare an operation on drivers.base.Driver instead"
    )


# --------------------------------------------------------------- the checker itself


def test_checker__finds_each_kind_of_violation(tmp_path, monkeypatch):
    fake = PACKAGE / "api" / "_architecture_probe.py"
    source = (
        "from django_ojs.lifecycle.store import db\n"
        "from django_ojs.lifecycle import events\n"
        "from django_ojs import drivers\n"
        "import django_ojs.drivers.base\n"
        "from django_ojs.lifecycle import fetch\n"
        "from django_ojs.settle import _RELEASE\n"
        "from . import _private\n"
        "from django_ojs import lifecycle\n"
        "x = lifecycle.maintenance.BATCH\n"
    )
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source)
    found = [str(i) for i in imports(fake)]
    assert "line 7: from django_ojs.api import _private" in found
    with pytest.raises(AssertionError) as info:
        test_adapters_use_the_lifecycle_facade_only(fake)
    message = str(info.value)
    for line in (1, 2, 3, 4, 9):
        assert f"line {line}:" in message
    assert "line 5:" not in message and "line 8:" not in message
    with pytest.raises(AssertionError) as info:
        test_no_private_names_imported_from_another_module(fake)
    assert "line 6:" in str(info.value) and "line 7:" in str(info.value)


def test_checker__finds_vendor_reads_and_raw_sql(monkeypatch):
    fake = PACKAGE / "jobquery_probe.py"
    source = (
        "from django.db import connections\n"
        "if connections['default'].vendor == 'postgresql':\n"
        "    pass\n"
        "with connections['default'].cursor() as c:\n"
        "    c.execute('SELECT 1')\n"
        "Job.objects.raw('SELECT * FROM ojs_job')\n"
        "x = RawSQL('1', [])\n"
        "Job.objects.filter(state='active')\n"
    )
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source)
    with pytest.raises(AssertionError) as info:
        test_only_the_drivers_know_the_database(fake)
    message = str(info.value)
    for line in (2, 4, 6, 7):
        assert f"line {line}:" in message
    assert "line 8:" not in message


def test_checker__finds_a_pure_module_reaching_up(monkeypatch):
    fake = PACKAGE / "retry.py"
    source = (
        "from django_ojs.exceptions import ValidationError\n"
        "from django_ojs.models import Job\n"
        "from django.db import connection\n"
        "from django_ojs import lifecycle\n"
        "from django_ojs.conf import settings\n"
    )
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source)
    with pytest.raises(AssertionError) as info:
        test_the_ojs_rules_use_no_database_and_no_layer_above(fake)
    message = str(info.value)
    for line in (2, 3, 4):
        assert f"line {line}:" in message
    assert "line 1:" not in message and "line 5:" not in message
