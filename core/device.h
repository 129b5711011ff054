// Where a tensor lives: the CPU or CUDA device N.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

namespace ember {

enum class DeviceType : uint8_t { cpu, cuda };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::cpu;
  int8_t index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(static_cast<int8_t>(i)) {}
  // "cpu", "cuda", "cuda:1".
  static Device parse(std::string_view s);

  constexpr bool is_cpu() const { return type == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }
  friend constexpr bool operator!=(Device a, Device b) { return !(a == b); }
};

inline constexpr Device kCPU{DeviceType::cpu, 0};
inline constexpr Device kCUDA{DeviceType::cuda, 0};

std::ostream& operator<<(std::ostream& os, Device d);
std::ostream& operator<<(std::ostream& os, DeviceType t);

}  // namespace ember
