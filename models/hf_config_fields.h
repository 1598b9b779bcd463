// Reading the fields of a Hugging Face config.json (models/hf_gpt2.cpp, models/llama.cpp): an
// optional field with its default, a required integer; a wrong type or a missing field is a
// ValueError naming `where` (the file) and the key.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tensor/error.h"

namespace st::models {

// j[key] as T; `dflt` when absent or null
template <class T>
T get_or(const nlohmann::json& j, const char* key, T dflt, const std::string& where) {
  if (!j.contains(key) || j.at(key).is_null()) return dflt;
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    ST_THROW(ValueError, where << ": \"" << key << "\" has the wrong type (" << j.at(key).dump() << ")");
  }
}

inline int64_t required_int(const nlohmann::json& j, const char* key, const std::string& where) {
  ST_CHECK(j.contains(key) && j.at(key).is_number_integer(), ValueError,
           where << ": \"" << key << "\" is missing or not an integer");
  return j.at(key).get<int64_t>();
}

}  // namespace st::models
