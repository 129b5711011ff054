// The fixture's header. Its comments name kernels/ops/present.h (present) and
// core/missing_from_comment.cpp (missing).
#pragma once
/* a block comment naming
   core/missing_in_block.h */
inline const char* kNotAComment = "core/in_a_string.h // core/still_in_the_string.h";
inline const char kQuote = '"';  // after a character literal: core/present.h
