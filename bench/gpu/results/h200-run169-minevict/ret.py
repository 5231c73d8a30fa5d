# Run 169 analysis (the script as run, kept as the record): steps 3-4's evictions of lmbig.blocks.tsv.gz: dead before they returned, and how long until each came back (G or F line).
# Step starts are this log's: the launches of an execution id seen once a step (launch indices 983, 5499, 8471, 11443, 14415, 17387).
# usage: python3 ret.py lmbig.blocks.tsv.gz [4032823296]
import gzip, sys, collections, bisect
path=sys.argv[1]
ev=collections.defaultdict(list)  # block -> [(t, kind)]
Lt=[]
for line in gzip.open(path,'rt'):
    p=line.rstrip('\n').split('\t')
    if len(p)<3 or p[0].startswith('#'): continue
    k=p[1]
    if k in 'CGVPDF' and len(k)==1:
        ev[int(p[2])].append((int(p[0]),k))
    elif k=='M':
        b,n=int(p[2]),int(p[3])
        for x in range(b,b+n): ev[x].append((int(p[0]),'M'+p[4]))
    elif k=='L': Lt.append(int(p[0]))
starts=[983, 5499, 8471, 11443, 14415, 17387]
ta,tb=Lt[starts[3]],Lt[starts[5]]
hist=collections.Counter(); total=0; dead_between=0
for b,es in ev.items():
    es.sort()
    for i,(t,k) in enumerate(es):
        if k!='C' or not (ta<=t<tb): continue
        total+=1
        # next G or F after t
        nxt=None; dead=False
        for t2,k2 in es[i+1:]:
            if k2=='Md': dead=True
            if k2 in ('G','F'):
                nxt=t2; break
        if dead: dead_between+=1; continue
        if nxt is None: hist['never']+=1; continue
        dt=(nxt-t)/1000
        for lim in (10,25,50,100,200,400,800):
            if dt<lim: hist[f'<{lim}ms']+=1; break
        else: hist['>=800ms']+=1
print("evictions (C) in steps 3-4:", total, "dead-marked before return:", dead_between)
for k in ['<10ms','<25ms','<50ms','<100ms','<200ms','<400ms','<800ms','>=800ms','never']:
    print(k, hist[k])
