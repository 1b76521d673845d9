"""Allocation-heavy Python workload: dict, list, tuple and string churn.

Run by bench/run.py with PYTHONMALLOC=malloc so every object goes through
the preloaded malloc instead of Python's own small-object arena. Each round
builds and tears down structures of mixed sizes and checks them against
values computed a second, independent way; a mismatch exits with status 2.

    python3 bench/pyalloc.py [--rounds=N] [--items=N]
"""
import random
import sys


def parse_args(argv):
    opts = {"rounds": 8, "items": 60000, "seed": 1}
    for arg in argv:
        name, sep, value = arg.removeprefix("--").partition("=")
        if not arg.startswith("--") or not sep or name not in opts:
            sys.exit(f"pyalloc.py: unknown argument {arg}")
        opts[name] = int(value)
    return opts


def fail(what):
    print(f"pyalloc.py: check failed: {what}", file=sys.stderr)
    sys.exit(2)


def one_round(rng, items):
    # Strings of many sizes, keyed by their index.
    table = {f"k{i}": "x" * rng.randrange(1, 600) + str(i) for i in range(items)}
    # Lists and tuples that grow and are sliced (realloc and free).
    rows = [list(range(i % 97)) for i in range(items)]
    pairs = [(i, str(i) * (i % 7 + 1)) for i in range(items)]
    # Delete a random half of the table and rebuild it with longer values.
    for i in rng.sample(range(items), items // 2):
        del table[f"k{i}"]
    for i in range(items):
        table.setdefault(f"k{i}", "y" * (i % 900) + str(i))
    joined = ",".join(v[-8:] for v in table.values())

    if len(table) != items:
        fail("dict size")
    for i in range(0, items, 97):
        if not table[f"k{i}"].endswith(str(i)):
            fail(f"dict value k{i}")
    if sum(len(r) for r in rows) != sum(i % 97 for i in range(items)):
        fail("list lengths")
    if any(p[1] != str(p[0]) * (p[0] % 7 + 1) for p in pairs[::113]):
        fail("tuple contents")
    if joined.count(",") != items - 1:
        fail("joined string")


def main():
    opts = parse_args(sys.argv[1:])
    rng = random.Random(opts["seed"])
    for _ in range(opts["rounds"]):
        one_round(rng, opts["items"])
    print(f"rounds={opts['rounds']} items={opts['items']}")


if __name__ == "__main__":
    main()
