"""What the t/lib/*_e2e.py checkers share: checks collected as they run, one failing check never
hiding the others, and one line per check at the end ("ok <name>" or "not ok <name>: <why>"),
which Test::Srt's tap_lines turns into TAP."""
results = []


def check(name, cond, why=""):
    results.append((name, bool(cond), why))


def guard(name, fn):
    try:
        fn()
    except Exception as e:   # a failure of one check must not hide the others
        check(name, False, "%s: %s" % (type(e).__name__, e))


def report():
    for name, good, why in results:
        print(("ok " if good else "not ok ") + name + ("" if good else ": " + why))
