# Run 169 analysis (the script as run, kept as the record): step 3's evictions of lmbig.blocks.tsv.gz: blocks named, evicted once or more, by their uses in the step.
# Step starts are this log's: the launches of an execution id seen once a step (launch indices 983, 5499, 8471, 11443, 14415, 17387).
# usage: python3 blocks.py lmbig.blocks.tsv.gz [4032823296]
import gzip, sys, bisect, collections
import os; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../'))
import minevict as mv
path, budget = sys.argv[1], int(sys.argv[2]); cap=budget//(2<<20)
launches, marks, moved = mv.read_log(path)
Lt=[]; ev=[]; ids=[]
for line in gzip.open(path,'rt'):
    p=line.rstrip('\n').split('\t')
    if len(p)<3 or p[0].startswith('#'): continue
    if p[1]=='L': Lt.append(int(p[0])); ids.append(p[3])
    elif p[1]=='C': ev.append((int(p[0]),int(p[2])))
starts=[983, 5499, 8471, 11443, 14415, 17387]
a,b=starts[3],starts[4]
ta,tb=Lt[a],Lt[b]
real=collections.Counter(blk for t,blk in ev if ta<=t<tb)
# blocks named per step, uses per block in the step
uses=collections.Counter()
for l in launches[a:b]:
    for x in l: uses[x]+=1
print("distinct blocks named in step 3:", len(uses), "budget", cap)
print("real evictions in step 3:", sum(real.values()), "distinct blocks evicted", len(real))
print("evicted k times:", sorted(collections.Counter(real.values()).items()))
print("evicted blocks not named in the step:", sum(1 for x in real if x not in uses))
# the use-count profile of evicted blocks
prof=collections.Counter(min(uses[x],10) for x in real)
print("evicted blocks by uses in the step:", sorted(prof.items()))
allprof=collections.Counter(min(u,10) for u in uses.values())
print("all named blocks by uses in the step:", sorted(allprof.items()))
# size of all launches: largest footprints
big=sorted(((len(l),ids[i]) for i,l in enumerate(launches[a:b],start=a)), reverse=True)[:10]
print("largest launches (blocks, id):", big)
