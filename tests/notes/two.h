// Fixture of scripts/check_notes.py's own test (see one.cpp).

// Note [twice]: a second text under the same name.
// Cites Note [once].

// Note [lookalike]: defined here; three.cpp opens a comment with the name as well.
