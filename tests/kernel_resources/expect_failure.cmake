# Runs scripts/kernel_resources.py --check on the fixture (tests/kernel_resources/: one ptxas report
# in build/, table.txt and allow.txt) and passes only if the check fails, naming each kernel and counter the
# fixture gets wrong and nothing it gets right, so that a check which never fails cannot pass
# unnoticed.
#   cmake -DPYTHON=python3 -DCHECKER=scripts/kernel_resources.py -DDIR=tests/kernel_resources
#         -P tests/kernel_resources/expect_failure.cmake
execute_process(COMMAND ${PYTHON} ${CHECKER} --build ${DIR}/build --check --table ${DIR}/table.txt --allow ${DIR}/allow.txt
                RESULT_VARIABLE r OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT r EQUAL 1)
  message(FATAL_ERROR "the kernel resource check exited ${r} on the fixture; expected 1 (a failed gate)")
endif()
set(expect
    "clean(float*): registers 30 in the table, 32 in the build"   # stale table
    "gone(int): in the table but not in the build"
    "spill(float*): spill_stores = 8 bytes"                       # spills, even when the table agrees
    "spill(float*): spill_loads = 12 bytes, above the 4 allowed"
    "allows stack_frame for nothing*, which no kernel of the build needs"
    "the table is stale")
foreach(line IN LISTS expect)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the kernel resource check did not report: ${line}")
  endif()
endforeach()
# What it must not report: the allowed stack frame, the non-entry helper, and the sm_80 kernel.
foreach(line IN ITEMS "spill(float*): stack_frame" "helper" "sm80k")
  string(FIND "${out}" "${line}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "the kernel resource check reported what the fixture gets right: ${line}")
  endif()
endforeach()
