// Fixture of scripts/check_notes.py's own test (see one.cpp): a comment block that opens with a
// note's name reads as its definition, colon or not; a wrapped line that starts with a citation
// (Note [once]) and a citation after code do not.

// Note [lookalike] in two.h, which defines it: reads like a second definition.

int h() { return 3; }  // a citation after code: Note [once]
// a sentence wrapped onto the next line, citing
// Note [once])
