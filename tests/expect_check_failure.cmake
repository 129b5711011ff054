# Runs a repository check (scripts/check_*.py) on a fixture tree where it must fail, and passes only
# if it fails and prints the expected line, so that a check which never fails cannot pass unnoticed.
#   cmake -DPYTHON=python3 -DCHECKER=scripts/check_layers.py -DROOT=tests/layering/bad [-DARGS=a;b]
#         -DEXPECT=<the line the check must print> -P tests/expect_check_failure.cmake
execute_process(COMMAND ${PYTHON} ${CHECKER} --root ${ROOT} ${ARGS} RESULT_VARIABLE r OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("${out}${err}")
if(r EQUAL 0)
  message(FATAL_ERROR "${CHECKER} passed the fixture ${ROOT}, where it must fail")
endif()
string(FIND "${out}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${CHECKER} failed (exit ${r}) but did not print: ${EXPECT}")
endif()
