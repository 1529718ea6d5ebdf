"""CI runs the static checks (scripts/static_checks.sh: ruff, then mypy over the installed
names), before the tests, with tools a fresh clone's .venv installs. CI runs the checks
themselves; this only holds the wiring."""
import ast
import pathlib
import re
import stat

ROOT = next(p for p in pathlib.Path(__file__).resolve().parents if (p / ".ci" / "run").is_file())
SCRIPT = ROOT / "scripts" / "static_checks.sh"


def _commands(path: pathlib.Path) -> list[str]:
    return [line.split("#")[0].strip() for line in path.read_text().splitlines()
            if line.split("#")[0].strip()]


def test_ci_runs_the_static_checks_before_the_tests():
    commands = _commands(ROOT / ".ci" / "run")
    checks = [i for i, c in enumerate(commands) if c.startswith("scripts/static_checks.sh")]
    tests = [i for i, c in enumerate(commands) if c.startswith("./run_tests.sh")]
    assert checks and tests and checks[0] < tests[0], commands
    assert SCRIPT.stat().st_mode & stat.S_IXUSR


def _setup_call(path: pathlib.Path) -> ast.Call:
    tree = ast.parse(path.read_text())
    return next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")


def _keyword(call: ast.Call, name: str):
    return next(k.value for k in call.keywords if k.arg == name)


def test_the_test_extra_installs_ruff_and_mypy():
    extras = ast.literal_eval(_keyword(_setup_call(ROOT / "setup.py"), "extras_require"))
    names = {re.split(r"[<>=!~\[ ]", requirement)[0] for requirement in extras["test"]}
    assert {"ruff", "mypy"} <= names, extras["test"]


def test_mypy_checks_every_product_package():
    """The script links each folder that setup.py and reader_dist/setup.py install as a
    dcm2tfrecord.* package (their package_dir) into the tree mypy reads."""
    folders = set()
    for setup in (ROOT / "setup.py", ROOT / "reader_dist" / "setup.py"):
        for key in _keyword(_setup_call(setup), "package_dir").keys:
            folders.add(ast.literal_eval(key).split(".")[1])
    linked = re.search(r"^for package in ([\w ]+); do$", SCRIPT.read_text(), re.M)
    assert linked and set(linked.group(1).split()) == folders, (folders, linked)
    assert (ROOT / "mypy.ini").is_file() and (ROOT / "ruff.toml").is_file()
