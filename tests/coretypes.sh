#!/bin/sh
# Reruns the numerical tests under each OpenBLAS kernel set this CPU can run,
# forced with OPENBLAS_CORETYPE: Prescott (SSE3) always, Haswell (AVX2) when
# the CPU has AVX2 and FMA, SkylakeX (AVX-512) when it has AVX-512F. The
# results must not depend on the set (within one, bit-identical; across sets,
# the tolerances of the tests). `make test` runs it after the whole suite,
# which ran under the set OpenBLAS picked for the CPU: that set is not run
# again. The arguments after PYTHON go to pytest (options, then the tests).
#
#   sh tests/coretypes.sh PYTHON [PYTEST_OPTION...] TEST_FILE...
py=$1
shift
default=$("$py" -c 'import ctypes; b = ctypes.CDLL("libopenblas.so.0"); b.openblas_get_corename.restype = ctypes.c_char_p; print(b.openblas_get_corename().decode())' 2>/dev/null)
case $(uname -m) in
  x86_64|amd64) ;;
  *) echo "== kernel sets: $default only (OPENBLAS_CORETYPE names x86 sets)"; exit 0 ;;
esac
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
sets=Prescott
case " $flags " in *" avx2 "*) case " $flags " in *" fma "*) sets="$sets Haswell" ;; esac ;; esac
case " $flags " in *" avx512f "*) sets="$sets SkylakeX" ;; esac
# Forcing the set OpenBLAS picked anyway would repeat the whole suite's run.
again=
for ct in $sets; do
  [ "$(echo "$ct" | tr A-Z a-z)" = "$(echo "$default" | tr A-Z a-z)" ] || again="$again $ct"
done
sets=${again# }
status=0
for ct in $sets; do
  echo "== numerical tests under OPENBLAS_CORETYPE=$ct"
  OPENBLAS_CORETYPE=$ct "$py" -m pytest -q "$@" || status=1
done
echo "== kernel sets run: $default (the whole suite, OpenBLAS's choice), then ${sets:-no other set} (numerical tests)"
exit $status
