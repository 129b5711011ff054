# Runs scripts/check_layers.py on a tree with a deliberate upward include and passes only if the
# check fails and names that include, so that a check which never fails cannot pass unnoticed.
#   cmake -DPYTHON=python3 -DCHECKER=scripts/check_layers.py -DROOT=tests/layering/bad
#         -DEXPECT=<the line the check must print> -P tests/layering/expect_violation.cmake
execute_process(COMMAND ${PYTHON} ${CHECKER} --root ${ROOT} RESULT_VARIABLE r OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(r EQUAL 0)
  message(FATAL_ERROR "the layer check passed a tree with an upward include (${ROOT})")
endif()
string(FIND "${out}" "${EXPECT}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the layer check failed (exit ${r}) but did not name the upward include: ${EXPECT}")
endif()
