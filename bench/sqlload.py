"""The sqlite workload: the sqlite3 command-line shell runs a generated SQL
script on an in-memory database (every page of it and every row and
statement object in malloc'd memory), and its output is compared with
answers computed here in Python, independently of sqlite.

The script builds a table of `rows` rows with a recursive CTE (names of
many lengths and blobs of 0-299 bytes), indexes it, updates a third of the
rows (longer names: records move), deletes a fifth, sorts and groups, and
copies a sorted projection into a second table."""
import shutil
from pathlib import Path

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def available():
    return shutil.which("sqlite3")


def script(rows):
    return f"""
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, payload BLOB);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {rows})
INSERT INTO t SELECT i, i % 97, 'n' || i || substr('{LETTERS * 4}', 1, i % 90), zeroblob(i % 300) FROM c;
CREATE INDEX t_grp_name ON t(grp, name);
SELECT count(*), sum(grp), sum(length(name)), sum(length(payload)) FROM t;
UPDATE t SET name = name || '-' || substr('{LETTERS * 8}', 1, 40 + id % 150) WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT grp, count(*), sum(length(name)) FROM t GROUP BY grp ORDER BY grp LIMIT 3;
CREATE TABLE u AS SELECT name || '/' || grp AS k FROM t ORDER BY k DESC;
SELECT count(*), min(k), max(length(k)) FROM u;
"""


def expected(rows):
    """What sqlite3 prints for script(rows), computed without sqlite."""
    alphabet4, alphabet8 = LETTERS * 4, LETTERS * 8
    t = {i: (i % 97, f"n{i}" + alphabet4[:i % 90], i % 300) for i in range(1, rows + 1)}
    out = [f"{len(t)}|{sum(g for g, _, _ in t.values())}|{sum(len(n) for _, n, _ in t.values())}|"
           f"{sum(b for _, _, b in t.values())}"]
    for i, (g, n, b) in t.items():
        if i % 3 == 0:
            t[i] = (g, n + "-" + alphabet8[:40 + i % 150], b)
    t = {i: v for i, v in t.items() if i % 5 != 0}
    groups = {}
    for g, n, _ in t.values():
        count, length = groups.get(g, (0, 0))
        groups[g] = (count + 1, length + len(n))
    out += [f"{g}|{groups[g][0]}|{groups[g][1]}" for g in sorted(groups)[:3]]
    keys = [f"{n}/{g}" for g, n, _ in t.values()]
    out.append(f"{len(keys)}|{min(keys)}|{max(len(k) for k in keys)}")
    return "\n".join(out) + "\n"


def prepare(directory, rows):
    """Writes the script for `rows` rows into directory; returns the argv
    that runs it and the output it must print."""
    path = Path(directory) / f"sqlload-{rows}.sql"
    path.write_text(script(rows))
    return ["sqlite3", "-batch", ":memory:", f".read {path}"], expected(rows)
