# Runs kernel_model --gate on a gate file that cannot hold (tests/model/impossible.txt) and passes
# only if the gate fails and prints each expected message, so that a gate which never fails cannot
# pass unnoticed.
#   cmake -DTOOL=bin/kernel_model -DGATE=tests/model/impossible.txt -DOP=relu
#         -DEXPECT="<message>;<message>" -P tests/model/expect_gate_failure.cmake
execute_process(COMMAND ${TOOL} --quick --op ${OP} --gate ${GATE} RESULT_VARIABLE r OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(r EQUAL 0)
  message(FATAL_ERROR "the kernel efficiency gate passed ${GATE}, whose bars cannot hold")
endif()
foreach(want IN LISTS EXPECT)
  string(FIND "${err}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the gate failed (exit ${r}) but did not say: ${want}")
  endif()
endforeach()
