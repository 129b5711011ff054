// Names for the simulator's reports: the kernel a launch runs and the code an access came from,
// read from the program's own symbol table (.symtab of /proc/self/exe, so static functions and
// template instances have names too), demangled; and the program's loaded segments, which a
// kernel may read (constant tables).
#include <cxxabi.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "sim/internal.h"

namespace ember::sim {

namespace {

struct Symbol {
  uintptr_t addr, size;
  std::string name;  // mangled
};

struct Image {
  std::vector<Symbol> symbols;                        // sorted by address
  std::vector<std::pair<uintptr_t, uintptr_t>> segs;  // loaded segments of every object
};

int collect_segments(dl_phdr_info* info, size_t, void* data) {
  auto* img = static_cast<Image*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    img->segs.emplace_back(lo, lo + ph.p_memsz);
  }
  return 0;
}

int main_bias(dl_phdr_info* info, size_t, void* data) {
  *static_cast<uintptr_t*>(data) = info->dlpi_addr;
  return 1;  // the first object is the program itself
}

void read_symbols(Image& img) {
  std::ifstream f("/proc/self/exe", std::ios::binary);
  if (!f) return;
  std::vector<char> file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (file.size() < sizeof(ElfW(Ehdr))) return;
  const auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(file.data());
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_shoff == 0) return;
  if (eh->e_shoff + static_cast<size_t>(eh->e_shnum) * sizeof(ElfW(Shdr)) > file.size()) return;
  const auto* sh = reinterpret_cast<const ElfW(Shdr)*>(file.data() + eh->e_shoff);
  uintptr_t bias = 0;
  dl_iterate_phdr(main_bias, &bias);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_SYMTAB) continue;
    const ElfW(Shdr)& strtab = sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > file.size() || strtab.sh_offset + strtab.sh_size > file.size()) return;
    const auto* syms = reinterpret_cast<const ElfW(Sym)*>(file.data() + sh[i].sh_offset);
    const size_t n = sh[i].sh_size / sizeof(ElfW(Sym));
    const char* names = file.data() + strtab.sh_offset;
    for (size_t k = 0; k < n; ++k) {
      if (ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC || syms[k].st_value == 0) continue;
      if (syms[k].st_name >= strtab.sh_size) continue;
      img.symbols.push_back(Symbol{bias + syms[k].st_value, syms[k].st_size, names + syms[k].st_name});
    }
  }
  std::sort(img.symbols.begin(), img.symbols.end(), [](const Symbol& a, const Symbol& b) { return a.addr < b.addr; });
}

const Image& image() {
  static Image* img = [] {
    auto* i = new Image();
    dl_iterate_phdr(collect_segments, i);
    read_symbols(*i);
    return i;
  }();
  return *img;
}

const Symbol* find_symbol(uintptr_t a) {
  const auto& s = image().symbols;
  auto it = std::upper_bound(s.begin(), s.end(), a, [](uintptr_t v, const Symbol& sym) { return v < sym.addr; });
  if (it == s.begin()) return nullptr;
  --it;
  if (a - it->addr > std::max<uintptr_t>(it->size, 1) && it->size != 0) return nullptr;
  return &*it;
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return mangled;
  std::string r(d);
  std::free(d);
  return r;
}

}  // namespace

std::string symbol_name(const void* address) {
  const Symbol* s = find_symbol(reinterpret_cast<uintptr_t>(address));
  return s == nullptr ? "" : demangle(s->name);
}

std::string code_location(const void* pc) {
  const auto a = reinterpret_cast<uintptr_t>(pc);
  char buf[48];
  const Symbol* s = find_symbol(a);
  if (s == nullptr) {
    std::snprintf(buf, sizeof buf, "%p", pc);
    return buf;
  }
  std::string n = demangle(s->name);
  const size_t paren = n.rfind('(');
  if (paren != std::string::npos && paren > 0) n = n.substr(0, paren);
  std::snprintf(buf, sizeof buf, "+0x%lx", static_cast<unsigned long>(a - s->addr));
  return n + buf;
}

bool is_static_data(uintptr_t a, size_t bytes) {
  for (const auto& [lo, hi] : image().segs)
    if (a >= lo && a + bytes <= hi) return true;
  return false;
}

}  // namespace ember::sim
