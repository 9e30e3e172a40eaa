"""The package's import graph: arrows point one way (see shared/STYLE.md)."""

import ast
from pathlib import Path

import seq2seq

PACKAGE = Path(seq2seq.__file__).parent


def _graph() -> dict[str, set[str]]:
  """module -> the seq2seq modules it imports (at any depth of its code)."""
  graph = {}
  for path in PACKAGE.glob("*.py"):
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seq2seq"):
        if node.module == "seq2seq":
          deps |= {alias.name for alias in node.names}
        else:
          deps.add(node.module.split(".")[1])
      elif isinstance(node, ast.Import):
        deps |= {a.name.split(".")[1] for a in node.names if a.name.startswith("seq2seq.")}
    graph[path.stem] = deps - {path.stem}
  return graph


def test_no_import_cycles():
  graph = _graph()
  state: dict[str, str] = {}

  def visit(module, path):
    if state.get(module) == "done":
      return
    assert state.get(module) != "open", f"import cycle: {' -> '.join(path + [module])}"
    state[module] = "open"
    for dep in sorted(graph.get(module, ())):
      visit(dep, path + [module])
    state[module] = "done"

  for module in sorted(graph):
    visit(module, [])


def _reachable(graph, start):
  seen, todo = set(), [start]
  while todo:
    for dep in graph.get(todo.pop(), ()):
      if dep not in seen:
        seen.add(dep)
        todo.append(dep)
  return seen


def test_model_and_search_see_ids_not_the_tokenizer():
  graph = _graph()
  for module in ("vocab", "masks", "layers", "model", "decode"):
    assert "tokenizer" not in _reachable(graph, module), module
  assert _reachable(graph, "vocab") == set()  # the special ids import nothing


def test_inference_needs_no_training_code():
  graph = _graph()
  training = {"optimizer", "train_step", "trainer", "train_cli"}
  for module in ("translator", "translate_cli", "evaluate_lib", "serve", "export", "decode",
                 "model", "checkpoint"):
    assert not training & _reachable(graph, module), module


def test_modules_and_classes_stay_small():
  """One job per module: at most ~400 lines a module, ~150 a class (shared/STYLE.md)."""
  for path in sorted(PACKAGE.glob("*.py")):
    text = path.read_text()
    assert len(text.splitlines()) <= 440, f"{path.name}: {len(text.splitlines())} lines"
    for node in ast.walk(ast.parse(text)):
      if isinstance(node, ast.ClassDef):
        lines = node.end_lineno - node.lineno + 1
        assert lines <= 160, f"{path.name}: class {node.name} has {lines} lines"
