"""The package's import graph, read from the source, lazy imports included: the layers in
one order, every arrow pointing down it (shared/STYLE.md), no module importing itself
back, each package's docstring naming its modules, and no private JAX import anywhere."""

import ast
import re
from pathlib import Path

import seq2seq

PACKAGE = Path(seq2seq.__file__).parent
ROOT = PACKAGE.parent
SUBPACKAGES = {"cli", "data", "decoding", "documents", "model", "numerics", "rundir", "serving",
               "training"}
# The modules of the top level, shared by every stage.
TOP = {"config", "recipes", "runtime", "scoring", "version", "vocab"}
# The layers, lowest first: a module imports from its own layer or from those before it,
# never from one after it (a function-level or PEP 562 lazy import counts as much as one
# at the top). `seq2seq` is the package itself, the public API over all of them.
LAYERS = ("version", "vocab", "config", "recipes", "runtime", "numerics", "data", "model",
          "rundir", "scoring", "decoding", "documents", "training", "serving", "cli", "seq2seq")


def _module(path: Path) -> str:
  parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, int]]:
  """(seq2seq module, line) of each import in the file, at any depth of its code (a name
  imported from a package counts as its module where one has that name)."""
  found = []
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "seq2seq":
      for alias in node.names:
        name = f"{node.module}.{alias.name}"
        as_module = PACKAGE.parent / name.replace(".", "/")
        found.append((name if as_module.with_suffix(".py").exists() or as_module.is_dir()
                      else node.module, node.lineno))
    elif isinstance(node, ast.Import):
      found += [(a.name, node.lineno) for a in node.names if a.name.startswith("seq2seq.")]
  return found


def _graph() -> dict[str, set[str]]:
  """module -> the seq2seq modules it imports."""
  return {_module(path): {m for m, _ in _imports(path)} - {_module(path)}
          for path in PACKAGE.rglob("*.py")}


def _reachable(graph, start):
  seen, todo = set(), [start]
  while todo:
    for dep in graph.get(todo.pop(), ()):
      if dep not in seen:
        seen.add(dep)
        todo.append(dep)
  return seen


def _stage(module: str) -> str:
  return module.split(".")[1] if module.count(".") >= 1 else "seq2seq"


def _modules(*stages: str) -> list[str]:
  return [m for m in _graph() if _stage(m) in stages]


def test_the_graph_reads_every_module_and_finds_the_layout():
  graph = _graph()
  assert {_stage(m) for m in graph} == SUBPACKAGES | TOP | {"seq2seq"} == set(LAYERS)
  assert "seq2seq.model.transformer" in graph["seq2seq.decoding.model_search"]
  # the package's lazy attributes are read too
  assert "seq2seq.training.trainer" in graph["seq2seq"]


def test_every_import_points_down_the_layers():
  upward = []
  for path in sorted(PACKAGE.rglob("*.py")):
    module = _module(path)
    for dep, line in _imports(path):
      if LAYERS.index(_stage(dep)) > LAYERS.index(_stage(module)):
        upward.append(f"{path.relative_to(ROOT)}:{line}: {module} ({_stage(module)}) imports "
                      f"{dep} ({_stage(dep)})")
  assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def test_a_lazy_import_in_a_function_is_an_arrow_too(tmp_path):
  (tmp_path / "m.py").write_text("def f():\n  from seq2seq.serving import http_server\n")
  assert _imports(tmp_path / "m.py") == [("seq2seq.serving.http_server", 2)]


def test_each_package_docstring_names_its_modules():
  for init in sorted(PACKAGE.glob("*/__init__.py")):
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    missing = [p.name for p in sorted(init.parent.glob("*.py"))
               if p.name != "__init__.py" and not re.search(rf"\b{re.escape(p.name)}\b", doc)]
    assert not missing, f"{init.relative_to(ROOT)}: its docstring does not name {missing}"


def test_no_private_jax_import_anywhere():
  for path in sorted([*ROOT.glob("*.py"), *(ROOT / "seq2seq").rglob("*.py"),
                      *(ROOT / "bench").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
    for node in ast.walk(ast.parse(path.read_text())):
      names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
               else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
      assert not any(n.startswith(("jax._src", "jaxlib._")) for n in names), (
          f"{path.relative_to(ROOT)}:{node.lineno}: private JAX module {names}")


def test_no_import_cycles_between_modules():
  graph = _graph()
  state: dict[str, str] = {}

  def visit(module, path):
    if state.get(module) == "done":
      return
    assert state.get(module) != "open", f"import cycle: {' -> '.join(path + [module])}"
    state[module] = "open"
    for dep in sorted(graph.get(module, ())):
      # a package's __init__ re-exporting its own modules is not an arrow back
      if not dep.startswith(module + "."):
        visit(dep, path + [module])
    state[module] = "done"

  for module in sorted(graph):
    visit(module, [])


def test_the_model_and_the_searches_see_ids_not_the_tokenizer_nor_training():
  graph = _graph()
  searches = {"seq2seq.decoding.decode"}
  for module in _modules("model", "numerics") + [*searches, "seq2seq.decoding.model_search"]:
    reach = _reachable(graph, module)
    forbidden = {m for m in reach if _stage(m) in ("training", "data", "serving", "cli",
                                                     "rundir", "decoding")
                 and m not in searches}
    assert not forbidden, f"{module} reaches {sorted(forbidden)}"
  assert _reachable(graph, "seq2seq.vocab") == set()  # the special ids import nothing


def test_numerics_imports_nothing_of_the_model():
  graph = _graph()
  for module in _modules("numerics"):
    assert {_stage(m) for m in _reachable(graph, module)} <= {"numerics"}, module


def test_inference_needs_no_training_code():
  graph = _graph()
  inference = (_modules("decoding", "documents", "serving", "rundir", "model")
               + ["seq2seq.cli.translate", "seq2seq.cli.evaluate", "seq2seq.cli.serve",
                  "seq2seq.cli.export", "seq2seq.cli.average", "seq2seq.scoring"])
  for module in inference:
    training = {m for m in _reachable(graph, module) if _stage(m) == "training"}
    assert not training, f"{module} reaches {sorted(training)}"


def test_only_the_command_lines_import_the_command_lines():
  graph = _graph()
  for module, deps in graph.items():
    if _stage(module) != "cli":
      assert not {d for d in deps if _stage(d) == "cli"}, module


def test_the_shared_top_level_imports_no_stage():
  graph = _graph()
  for module in ("seq2seq.config", "seq2seq.vocab", "seq2seq.runtime", "seq2seq.recipes",
                 "seq2seq.version"):
    assert not {_stage(m) for m in _reachable(graph, module)} & SUBPACKAGES, module


def test_importing_the_package_and_translator_loads_no_training_code():
  """`seq2seq.train` imports training code when it is first used, not before."""
  import subprocess
  import sys
  code = ("import sys, seq2seq; from seq2seq import Translator, Config; "
          "print([m for m in sys.modules if m.startswith('seq2seq.training')])")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       check=True).stdout
  assert out.strip() == "[]"
  code = "import sys, seq2seq; seq2seq.train; print('seq2seq.training.trainer' in sys.modules)"
  assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        check=True).stdout.strip() == "True"
