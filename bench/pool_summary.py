import sys, statistics as st, collections
d = collections.defaultdict(list)
for f in sys.argv[1:]:
    for line in open(f):
        v,t,l,w,x = line.split('\t'); d[(w,l,t,v)].append(float(x))
ws = ['train_s','attn_ms','gemm512_ms','gemm128_ms','peak_gflops']
vs = sorted({k[3] for k in d}, key=lambda v: ['before','before_passive','after_s20','after_s0','after_s100'].index(v))
print('workload\tload\tthreads\t' + '\t'.join(vs) + '\tn')
for w in ws:
  for l in ['idle','busy']:
    for t in ['1','2']:
      row = [f"{st.median(d[(w,l,t,v)]):.4g}" if d[(w,l,t,v)] else '-' for v in vs]
      print(f"{w}\t{l}\t{t}\t" + '\t'.join(row) + f"\t{len(d[(w,l,t,vs[0])])}")
