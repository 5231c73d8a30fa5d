# Run 169 analysis (the script as run, kept as the record): how far the GPU runs behind the ring (from faults), and how soon each victim (V line) is named again.
# Step starts are this log's: the launches of an execution id seen once a step (launch indices 983, 5499, 8471, 11443, 14415, 17387).
# usage: python3 lag.py lmbig.blocks.tsv.gz [4032823296]
import gzip, sys, bisect, collections, statistics
import os; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../'))
import minevict as mv
path=sys.argv[1]
launches, marks, moved = mv.read_log(path)
Lt=[]; F=[]; V=[]
for line in gzip.open(path,'rt'):
    p=line.rstrip('\n').split('\t')
    if len(p)<3 or p[0].startswith('#'): continue
    if p[1]=='L': Lt.append(int(p[0]))
    elif p[1]=='F': F.append((int(p[0]),int(p[2])))
    elif p[1]=='V': V.append((int(p[0]),int(p[2])))
uses=collections.defaultdict(list)
for i,l in enumerate(launches):
    for b in l: uses[b].append(i)
lags=[]
for t,b in F[::20]:
    i=bisect.bisect_right(Lt,t)-1
    u=uses.get(b)
    if not u or i<0: continue
    k=bisect.bisect_right(u,i)-1
    if k<0: continue
    lags.append(i-u[k])
lags.sort()
print("faults sampled",len(lags),"lag (launches) p10/p50/p90:",lags[len(lags)//10],lags[len(lags)//2],lags[9*len(lags)//10])
# victims: next use distance from ring position i (upper bound on GPU pos)
cap=int(sys.argv[2])//(2<<20)
dist=[]
for t,b in V:
    i=bisect.bisect_right(Lt,t)-1
    u=uses.get(b)
    if not u: continue
    k=bisect.bisect_right(u,i)
    if k==len(u): dist.append(None); continue
    # blocks named between i and next use
    j=u[k]
    dist.append(j-i)
d=[x for x in dist if x is not None]
d.sort()
print("victims",len(V),"next use in launches after ring pos p10/p25/p50/p75:",d[len(d)//10],d[len(d)//4],d[len(d)//2],d[3*len(d)//4], "never:",dist.count(None))
