"""The figures the client suites record (tests_clients, tests_vllm): each
test writes figures[name] = value; the run prints them at its end and, with
the environment variable its conftest names set to a FILE, writes them there
as JSON."""
import json
import os

FIGURES = {}


def report(terminalreporter, title, env_var):
    if not FIGURES:
        return
    terminalreporter.section(title)
    for name, value in sorted(FIGURES.items()):
        shown = f"{value:.3g}" if isinstance(value, float) else str(value)
        terminalreporter.write_line(f"{name}: {shown}")
    path = os.environ.get(env_var)
    if path:
        with open(path, "w") as f:
            json.dump(FIGURES, f, indent=1, sort_keys=True)
            f.write("\n")
