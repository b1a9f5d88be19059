#!/usr/bin/env bash
# sasscmp.sh OLD NEW: compares the device code of two kernel sets (ncclgen
# build output: an NGKSET manifest in front of a fatbin), function by
# function, for one arch (SASSCMP_ARCH, default sm_90).
#
# Each function's machine code (its .text.NAME section of the linked cubin)
# is compared byte for byte; a function that is the same to the byte has the
# same SASS. For each that differs, `cuobjdump -sass -fun` writes both sides
# to DIR/NAME.old.sass and DIR/NAME.new.sass (SASSCMP_KEEP=DIR, default a
# temporary directory that is removed), to be read with diff. The hash that
# nvcc puts in the names of a unit's internal functions (_INTERNAL_xxxxxxxx_)
# is dropped: it changes with the unit's text.
#
# Prints one line per function that differs or that one side lacks, then a
# summary; exits 1 when any does. Needs cuobjdump (CUDA toolkit) and python3.
# (Disassembling a whole kernel set takes tens of minutes; this takes seconds
# plus a few per differing function.)
set -euo pipefail
if [ $# -ne 2 ]; then
	echo "usage: $0 OLD.fatbin NEW.fatbin" >&2
	exit 2
fi
arch=${SASSCMP_ARCH:-sm_90}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
keep=${SASSCMP_KEEP:-$tmp/keep}
mkdir -p "$keep"
for side in old new; do
	f=$1
	[ "$side" = new ] && f=$2
	mkdir -p "$tmp/$side"
	# kset layout: magic (8 bytes), manifest length, fatbin offset (uint32 LE each).
	python3 - "$f" "$tmp/$side/k.fatbin" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
if b[:8] != b"NGKSET\r\n":
    sys.exit(f"{sys.argv[1]}: not a kernel set (magic {b[:8]!r})")
off = struct.unpack_from("<I", b, 12)[0]
open(sys.argv[2], "wb").write(b[off:])
PY
	(cd "$tmp/$side" && cuobjdump -xelf all k.fatbin >/dev/null)
	cubin=$(ls "$tmp/$side"/*."$arch".cubin 2>/dev/null | head -1)
	if [ -z "$cubin" ]; then
		echo "$f: no $arch cubin" >&2
		exit 2
	fi
	mv "$cubin" "$tmp/$side.cubin"
done
python3 - "$tmp/old.cubin" "$tmp/new.cubin" >"$tmp/report" <<'PY'
import re, struct, sys

def functions(path):
    """Maps each function (normalized name) to (ELF name, machine code)."""
    b = open(path, "rb").read()
    if b[:4] != b"\x7fELF" or b[4] != 2:
        sys.exit(f"{path}: not a 64-bit ELF")
    shoff, = struct.unpack_from("<Q", b, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    strtab = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        end = b.index(b"\0", strtab + h[0])
        name = b[strtab + h[0]:end].decode()
        if name.startswith(".text."):
            fn = name[len(".text."):]
            out[re.sub(r"_INTERNAL_[0-9a-f]{8}_", "_INTERNAL_", fn)] = (fn, b[h[4]:h[4] + h[5]])
    return out

old, new = functions(sys.argv[1]), functions(sys.argv[2])
names = sorted(set(old) | set(new))
same = 0
for n in names:
    if n not in old or n not in new:
        print(f"ONLY-{'NEW' if n in new else 'OLD'} {n}")
    elif old[n][1] == new[n][1]:
        same += 1
    else:
        print(f"DIFF {n} {old[n][0]} {new[n][0]} ({len(old[n][1])} -> {len(new[n][1])} bytes)")
print(f"SUMMARY {same} of {len(names)} functions identical")
PY
status=0
while read -r kind name a b rest; do
	case $kind in
	SUMMARY) echo "$name $a $b $rest" ;;
	DIFF)
		status=1
		echo "DIFF $name $rest"
		cuobjdump -sass -fun "$a" "$tmp/old.cubin" >"$keep/$name.old.sass"
		cuobjdump -sass -fun "$b" "$tmp/new.cubin" >"$keep/$name.new.sass"
		;;
	*)
		status=1
		echo "$kind $name"
		;;
	esac
done <"$tmp/report"
exit $status
