// Fixture for scripts/check_function_length.py (never compiled): one function over the limit the
// fixture test sets (10 lines), one within it, and a lambda and a table that do not count as
// functions of their own.
#include <vector>

namespace fixture {

const int kTable[] = {
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
};

int short_one(int x) {
  auto twice = [](int v) { return 2 * v; };
  return twice(x);
}

int too_long(int x) {
  int s = 0;
  for (int i = 0; i < x; ++i) {
    s += i;
    s += kTable[i % 20];
  }
  if (s > 100) {
    s -= 100;
  }
  const char* brace_in_a_string = "}";
  return s + (brace_in_a_string[0] == '}' ? 1 : 0);
}

}  // namespace fixture
