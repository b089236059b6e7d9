"""Medians and ranges of the metrics in go test -bench output files, and
of `rvt perf`'s rows (perf.log) and `rvt demo`'s throughputs (demo.log)
(docs/issue19-rows.sh): python3 docs/issue19-med.py FILE..."""
import collections
import re
import statistics
import sys

WANT = re.compile(r'(Gbit|send_med|udp_med|lat_x|x_|cpu_ns|GB/s|msgs/s|acks|rc_|udp_|uc_|half|2frames|goodput|8qps_cpu|heapB/qp_b|lossless)')


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


def parse_log(path):
    """rvt perf's rows ("xdp 4096 9000 WRITE UDP x_udp SEND_med SEND_p99
    UDP_med UDP_p99 lat_x ..." and the same with "busy xdp" and dashes for
    the goodput) and rvt demo's "(7.29 Gbit/s)"."""
    d = collections.defaultdict(lambda: collections.defaultdict(list))
    for line in open(path):
        f = line.split()
        busy = f[:2] == ['busy', 'xdp']
        if busy:
            f = f[1:]
        if len(f) >= 11 and f[0] in ('xdp', 'udp', 'tap') and f[1].isdigit():
            name = ('busy ' if busy else '') + f'perf {f[0]} {f[1]}'
            cols = ['x_udp', 'send_med_us', 'udp_med_us', 'lat_x']
            for k, v in zip(cols, [f[5], f[6], f[8], f[10]]):
                if v != '-':
                    d[name][k].append(float(v))
        m = re.search(r'RC +RDMA_WRITE throughput.*\(([\d.]+) Gbit/s\)', line)
        if m:
            d['demo RC WRITE']['Gbit/s'].append(float(m.group(1)))
    return d


for path in sys.argv[1:]:
    print('==', path)
    rows = parse_log(path) if path.endswith('.log') else parse(path)
    for name, m in rows.items():
        cells = [f'{k}={statistics.median(v):.3g}({min(v):.3g}-{max(v):.3g})'
                 for k, v in m.items() if WANT.match(k)]
        print(name, ' '.join(cells))
