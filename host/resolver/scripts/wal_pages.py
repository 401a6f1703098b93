#!/usr/bin/env python3
"""Which b-trees a SQLite database's WAL frames belong to, per event and per commit.

Used for decision 0103 (Resolver store: fewer WAL pages per event). It needs a WAL that
kept every frame, i.e. a run with checkpoints held off (0103 did it with a temporary build:
`wal_autocheckpoint = 0`, no checkpoint thread, the WAL copied aside before the store closed,
and each `record_batch` size written to `BASE.batches`, one per line).

Usage: wal_pages.py DB WAL [BATCHES]
Prints frames, commits, frames per event (two observations per event), the batch-size
distribution when BATCHES is given, and frames per b-tree (from `dbstat` on a copy).
"""
import collections, os, shutil, sqlite3, struct, sys, tempfile

db_path, wal_path = sys.argv[1], sys.argv[2]
batches_path = sys.argv[3] if len(sys.argv) > 3 else None
wal = open(wal_path, 'rb').read()
ps = struct.unpack('>I', wal[8:12])[0]
salt = wal[16:24]
off = 32
frames = []
while off + 24 + ps <= len(wal):
    pg, commit = struct.unpack('>II', wal[off:off+8])
    if wal[off+8:off+16] != salt:
        break
    frames.append((pg, commit))
    off += 24 + ps
# Map pages to b-trees on a copy (opening it recovers the WAL).
tmp = os.path.join(tempfile.mkdtemp(), 'copy.db')
shutil.copy(db_path, tmp)
shutil.copy(wal_path, tmp + '-wal')
c = sqlite3.connect(tmp)
owner, kind = {}, {}
for name, pageno, pagetype in c.execute("select name, pageno, pagetype from dbstat"):
    owner[pageno] = name
    kind[pageno] = pagetype
c.close()
batches = [int(x) for x in open(batches_path).read().split()] if batches_path else []
commits = sum(1 for f in frames if f[1])
obs = sum(batches)
events = obs / 2 if obs else None
print(f"frames {len(frames)}, commits {commits}", end='')
if events:
    print(f", observations {obs}, frames/event {len(frames)/events:.2f}, obs/commit {obs/max(commits,1):.1f}")
    bs = sorted(batches)
    n = len(bs)
    print(f"batches: {n}, mean {obs/n:.1f}, p10 {bs[n//10]}, p50 {bs[n//2]}, p90 {bs[9*n//10]}, max {bs[-1]}")
else:
    print()
byk = collections.Counter((owner.get(pg, 'freelist/unknown'), kind.get(pg, '?')) for pg, _ in frames)
for (name, k), n in sorted(byk.items(), key=lambda x: -x[1]):
    per_event = f"{n/events:.3f}/event  " if events else ""
    print(f"  {name:30s} {k:9s} {n:8d}  {per_event}{n/max(commits,1):.2f}/commit")
