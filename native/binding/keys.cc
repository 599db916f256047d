// The addon's constant strings (keys.h).
#include "binding/keys.h"

#include <napi.h>

#include <cstring>

namespace proctree {
namespace binding {

void Keys::init(Napi::Env env) {
#define PROCTREE_KEY_TEXT(name, text) text,
  static const char* const kTexts[kCount] = {PROCTREE_KEYS(PROCTREE_KEY_TEXT)};
#undef PROCTREE_KEY_TEXT
  Napi::Array strings = Napi::Array::New(env, kCount);
  // V8 internalizes a key on its first use as a property name (the string
  // becomes a reference to its internalized copy): later Gets and Sets by
  // it do not hash it again.
  for (uint32_t i = 0; i < kCount; ++i) strings.Set(i, Napi::String::New(env, kTexts[i]));
  strings_ = Napi::Persistent(strings);
}

napi_value Keys::operator[](Name name) const {
  napi_value out = nullptr;
  napi_get_element(strings_.Env(), strings_.Value(), static_cast<uint32_t>(name), &out);
  return out;
}

napi_value Keys::text(Napi::Env env, const char* s) {
  Napi::Array strings = strings_.Value();
  for (size_t i = 0; i < n_texts_; ++i) {
    if (texts_[i] == s || strcmp(texts_[i], s) == 0) return strings.Get(static_cast<uint32_t>(kCount + i));
  }
  Napi::String value = Napi::String::New(env, s);
  if (n_texts_ < texts_.size()) {
    strings.Set(static_cast<uint32_t>(kCount + n_texts_), value);
    texts_[n_texts_++] = s;
  }
  return value;
}

}  // namespace binding
}  // namespace proctree
