// Fixture of scripts/check_notes.py's own test: a note defined here and again in two.h, a note
// defined once and cited, and a citation of a note that exists nowhere.

// Note [twice]: the first text of a name.

// Note [once]: defined here only (cited below and in two.h).
int f() { return 1; }  // Note [once]

int g() { return 2; }  // see Note [nowhere]
