// MOE_ASAN: 1 when this translation unit is built with AddressSanitizer, by either compiler
// (g++ defines __SANITIZE_ADDRESS__; clang 14 only answers __has_feature).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define MOE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOE_ASAN 1
#endif
#endif
#ifndef MOE_ASAN
#define MOE_ASAN 0
#endif
