"""Medians and ranges of the metrics in go test -bench output files
(docs/issue19-rows.sh): python3 docs/issue19-med.py FILE..."""
import collections
import re
import statistics
import sys

WANT = re.compile(r'(x_|cpu_ns|GB/s|msgs/s|acks|rc_|udp_|uc_|half|2frames|goodput|8qps_cpu|heapB/qp_b|lossless)')


def parse(path):
    d = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in open(path):
        if not line.startswith('Benchmark'):
            continue
        f = line.split()
        name = re.sub(r'-\d+$', '', f[0])
        for i in range(4, len(f) - 1, 2):
            try:
                d[name][f[i + 1]].append(float(f[i]))
            except ValueError:
                pass
    return d


for path in sys.argv[1:]:
    print('==', path)
    for name, m in parse(path).items():
        cells = [f'{k}={statistics.median(v):.3g}({min(v):.3g}-{max(v):.3g})'
                 for k, v in m.items() if WANT.match(k)]
        print(name, ' '.join(cells))
