#!/usr/bin/env python3
"""sassclassify.py DIR: sorts the functions whose SASS tests/sasscmp.sh kept
in DIR (NAME.old.sass, NAME.new.sass) by how they differ, with register,
predicate and barrier numbers, branch targets, .reuse hints and NOP padding
masked: "same instructions" (renumbering only), the one rewrite that the
devdedup merges brought (N-1-j computed as N+~j, as ~j == -j-1), or OTHER,
printed with its differing lines, to be read by hand. A heuristic for
reading many diffs; a function it calls OTHER is not thereby different.
"""
import re,difflib,sys,os,collections
def ops(p):
    r=[]
    for l in open(p):
        l=l.strip()
        if not l or l.startswith('/* 0x') or 'Function' in l or l.startswith('.') or 'code for' in l or l.startswith('Fatbin') or l.startswith('arch') or l.startswith('code version') or l.startswith('host') or l.startswith('compile_size') or l.startswith('identifier'): continue
        l=re.sub(r'/\*[0-9a-f]{4,}\*/','',l); l=re.sub(r'/\*.*?\*/','',l).strip()
        if l=='NOP ;' or l=='NOP;': continue
        l=l.replace('.reuse','')
        l=re.sub(r'\bU?R\d+\b','R',l); l=re.sub(r'\bB\d+\b','B',l); l=re.sub(r'\bU?P\d\b','P',l)
        l=re.sub(r'(BRA\.DIV R,|BRA|BSSY B,|WARPSYNC\.COLLECTIVE R,|CALL\.REL\.NOINC|JMP|BREAK|BMOV) .*',r'\1 T',l)
        r.append(l)
    return r
pat=('-@P IMAD.IADD R, R, 0x1, -R ;','+@P LOP3.LUT R, RZ, R, RZ, 0x33, !PT ;','+@P IMAD.IADD R, R, 0x1, R ;')
cnt=collections.Counter()
d=sys.argv[1]
for f in sorted(os.listdir(d)):
    if not f.endswith('.old.sass'): continue
    n=f[:-9]
    dd=[l for l in difflib.unified_diff(ops(f'{d}/{n}.old.sass'),ops(f'{d}/{n}.new.sass'),lineterm='',n=0) if not l.startswith(('---','+++','@@'))]
    rest=list(dd)
    k=0
    pat2=('-@P IADD3 R, -R, -0x1, R ;',)+pat[1:]
    for pp in (pat,pat2):
        while all(p in rest for p in pp):
            for p in pp: rest.remove(p)
            k+=1
    minus=collections.Counter(l[1:] for l in rest if l.startswith('-')); plus=collections.Counter(l[1:] for l in rest if l.startswith('+'))
    if not dd: key='same instructions, registers renumbered'
    elif not rest: key=f'N-1-j computed as N+~j , registers renumbered'
    elif minus==plus: key=f'N-1-j as N+~j  and instructions reordered, registers renumbered'
    else: key='OTHER'
    if key=='OTHER': print(n, rest[:12])
    cnt[key]+=1
for k,v in sorted(cnt.items()): print(v, k)
