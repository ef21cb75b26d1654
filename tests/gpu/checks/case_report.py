"""One case of a GPU check script, reported as one JSON line (graph_check.py, adapter_check.py)."""
import json


def run_case(case, args, fields):
    """Runs case(*args); prints {**fields, "ok", "detail"} and returns the exit status (0: ok).

    An exception is the case's failure, said in one line."""
    try:
        ok, detail = case(*args)
    except Exception as e:
        ok, detail = False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    print(json.dumps({**fields, "ok": ok, "detail": detail}), flush=True)
    return 0 if ok else 1
