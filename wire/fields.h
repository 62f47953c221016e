// Field lists: which Cap'n Proto field each member of a plain C++ struct travels in, written once and read by both
// directions. The control codec, the data codec, the job spec's (wire/job_spec_wire.cc) and the coordinator's journal
// (coordinator/journal_format.cc) describe their structs so, instead of copying member by member by hand in an
// encoder and again, the other way round, in a decoder.
//
//   constexpr auto kLeaseRef = fields::List<LeaseRef>(STOKER_FIELD(job, Job), STOKER_FIELD(rank, Rank));
//   fields::Encode(kLeaseRef, ref, builder);            // builder.setJob(ref.job); builder.setRank(ref.rank);
//   Status s = fields::Decode(kLeaseRef, reader, &ref);  // ref.job = reader.getJob().cStr(); ...
//
// STOKER_FIELD(member, Name) binds the member to the field whose generated accessors are getName, setName and
// initName. The member's C++ type says how it travels: numbers, bools and strings as they are (a text is read up to
// its first NUL, as cStr() gives it); a std::vector of numbers or strings as a List; any other type as a struct,
// through its ToWire/FromWire overloads (JobSpec, Status: included below). Wrappers say the rest: Each a list of
// structs with a field list of their own, Nested one such struct, Mapped an enum, Bytes a Data field, Telemetry a
// figure a peer reports. A field none of these fits is a struct with Put(const T&, Builder) and Get(Reader, T*).
// A std::variant carried in a union is a tuple of alternatives in the variant's order (Member, Inline, Whole), for
// PutVariant and GetVariant.
//
// Encode writes the fields in list order, and the order fixes where each text, list and struct lands in the message:
// a list keeps the order the hand-written setters had, so the bytes are what they were (the fuzz_seeds_match_corpus
// test compares every encoder's output with the committed seed corpus). Decode reads in the same order and stops at
// the first field that fails.
//
// Thread safety: stateless.
#pragma once

#include <capnp/blob.h>
#include <kj/common.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "stoker/status.h"
// The struct-typed members messages have, whose ToWire/FromWire overloads must be declared before the templates
// below that call them (the builders and readers they take are in stoker::wire, where lookup would not find them).
#include "wire/frames.h"
#include "wire/job_spec_wire.h"

namespace stoker::fields {

// The generated accessors of one Cap'n Proto field, as generic lambdas: only those a member's type uses are ever
// instantiated (a number has no init, only a union member has is).
template <typename Get, typename Set, typename Init, typename Is>
struct Accessors {
  Get get;
  Set set;
  Init init;
  Is is;
};

template <typename Get, typename Set, typename Init, typename Is>
constexpr Accessors<Get, Set, Init, Is> MakeAccessors(Get get, Set set, Init init, Is is) {
  return {get, set, init, is};
}

template <typename T>
struct IsVector : std::false_type {};
template <typename T, typename Allocator>
struct IsVector<std::vector<T, Allocator>> : std::true_type {};

// How a member travels by default, from its C++ type (see the top of this file).
struct ByType {
  template <typename Wire, typename Builder, typename T>
  void Put(const Wire& wire, Builder out, const T& value) const {
    if constexpr (IsVector<T>::value) {
      auto list = wire.init(out, static_cast<unsigned>(value.size()));
      for (size_t i = 0; i < value.size(); ++i) list.set(static_cast<unsigned>(i), value[i]);
    } else if constexpr (std::is_arithmetic_v<T> || std::is_same_v<T, std::string>) {
      wire.set(out, value);
    } else {
      ToWire(value, wire.init(out));
    }
  }

  // Void where reading cannot fail; a Status for a struct whose FromWire can.
  template <typename Wire, typename Reader, typename T>
  auto Get(const Wire& wire, Reader in, T* value) const {
    if constexpr (IsVector<T>::value) {
      auto list = wire.get(in);
      T elements(list.size());  // a batch header's lists hold 3 x its batch size: filled in place, no push_back
      for (unsigned i = 0; i < list.size(); ++i) {
        if constexpr (std::is_same_v<typename T::value_type, std::string>) {
          elements[i].assign(list[i].cStr(), list[i].size());
        } else {
          elements[i] = list[i];
        }
      }
      *value = std::move(elements);
    } else if constexpr (std::is_same_v<T, std::string>) {
      *value = wire.get(in).cStr();
    } else if constexpr (std::is_arithmetic_v<T>) {
      *value = wire.get(in);
    } else {
      return GetStruct(wire.get(in), value);
    }
  }

  template <typename Reader, typename T>
  static Status GetStruct(Reader in, T* value) {
    auto decoded = FromWire(in);
    if constexpr (std::is_same_v<decltype(decoded), T>) {
      *value = std::move(decoded);
    } else {
      if (!decoded.ok()) return decoded.status();
      *value = std::move(*decoded);
    }
    return Status::Ok();
  }
};

// One member (reached by `member`, a lambda returning a reference to it) travelling in one field, as `codec` says.
template <typename Member, typename Wire, typename Codec = ByType>
struct Field {
  Member member;
  Wire wire;
  Codec codec;

  template <typename T, typename Builder>
  void Put(const T& value, Builder out) const {
    codec.Put(wire, out, member(value));
  }
  template <typename Reader, typename T>
  auto Get(Reader in, T* value) const {
    return codec.Get(wire, in, &member(*value));
  }
};

template <typename Member, typename Wire>
constexpr Field<Member, Wire> Bind(Member member, Wire wire) {
  return {member, wire, ByType()};
}

// The same field travelling as `codec` says instead.
template <typename Member, typename Wire, typename Codec>
constexpr Field<Member, Wire, Codec> Recode(const Field<Member, Wire>& field, Codec codec) {
  return {field.member, field.wire, codec};
}

// The fields of T, in the order they are written and read.
template <typename T, typename... F>
struct FieldList {
  using Type = T;
  std::tuple<F...> fields;
};

template <typename T, typename... F>
constexpr FieldList<T, F...> List(F... fields) {
  return {{fields...}};
}

// Writes every field of `value` into `out`, in list order.
template <typename T, typename... F, typename Builder>
void Encode(const FieldList<T, F...>& list, const T& value, Builder out) {
  std::apply([&](const auto&... field) { (field.Put(value, out), ...); }, list.fields);
}

// Reads one field: false, with *status saying why, if it fails. Most fields cannot (their Get returns nothing), and
// cost no Status.
template <typename F, typename Reader, typename T>
bool GetField(const F& field, Reader in, T* value, Status* status) {
  if constexpr (std::is_void_v<decltype(field.Get(in, value))>) {
    field.Get(in, value);
    return true;
  } else {
    *status = field.Get(in, value);
    return status->ok();
  }
}

// Reads every field of `in` into *value, in list order, up to the first that fails.
template <typename T, typename... F, typename Reader>
Status Decode(const FieldList<T, F...>& list, Reader in, T* value) {
  Status status;
  std::apply([&](const auto&... field) { (void)(GetField(field, in, value, &status) && ...); }, list.fields);
  return status;
}

// Codecs for what ByType cannot tell from the type.

// A struct with a field list of its own, in a struct field.
template <typename L>
struct NestedCodec {
  L list;

  template <typename Wire, typename Builder, typename T>
  void Put(const Wire& wire, Builder out, const T& value) const {
    Encode(list, value, wire.init(out));
  }
  template <typename Wire, typename Reader, typename T>
  Status Get(const Wire& wire, Reader in, T* value) const {
    return Decode(list, wire.get(in), value);
  }
};

// A std::vector of structs as a List of structs.
template <typename L>
struct EachCodec {
  L list;

  template <typename Wire, typename Builder, typename T>
  void Put(const Wire& wire, Builder out, const std::vector<T>& elements) const {
    auto out_list = wire.init(out, static_cast<unsigned>(elements.size()));
    for (size_t i = 0; i < elements.size(); ++i) Encode(list, elements[i], out_list[static_cast<unsigned>(i)]);
  }
  template <typename Wire, typename Reader, typename T>
  Status Get(const Wire& wire, Reader in, std::vector<T>* elements) const {
    for (auto element : wire.get(in)) {
      STOKER_RETURN_IF_ERROR(Decode(list, element, &elements->emplace_back()));
    }
    return Status::Ok();
  }
};

// How an enum class maps onto a Cap'n Proto enum, and what to say of a value on the wire it does not list (a newer
// peer's). A C++ value it does not list (none exists) is written as the first pair's.
template <typename Cpp, typename Capnp, size_t N>
struct EnumMap {
  std::array<std::pair<Cpp, Capnp>, N> pairs;
  const char* unknown;

  template <typename Wire, typename Builder>
  void Put(const Wire& wire, Builder out, Cpp value) const {
    Capnp on_wire = pairs[0].second;
    for (const auto& [cpp, capnp] : pairs) {
      if (cpp == value) on_wire = capnp;
    }
    wire.set(out, on_wire);
  }
  template <typename Wire, typename Reader>
  Status Get(const Wire& wire, Reader in, Cpp* value) const {
    const Capnp on_wire = wire.get(in);
    for (const auto& [cpp, capnp] : pairs) {
      if (capnp == on_wire) {
        *value = cpp;
        return Status::Ok();
      }
    }
    return InvalidArgumentError(unknown);
  }
};

template <typename Cpp, typename Capnp, typename... More>
constexpr EnumMap<Cpp, Capnp, 1 + sizeof...(More)> MakeEnumMap(const char* unknown, std::pair<Cpp, Capnp> first,
                                                                More... more) {
  return {{{first, more...}}, unknown};
}

// A std::string of bytes as a Data field.
struct BytesCodec {
  template <typename Wire, typename Builder>
  void Put(const Wire& wire, Builder out, const std::string& bytes) const {
    wire.set(out, kj::arrayPtr(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size()));
  }
  template <typename Wire, typename Reader>
  void Get(const Wire& wire, Reader in, std::string* bytes) const {
    auto data = wire.get(in);
    bytes->assign(reinterpret_cast<const char*>(data.begin()), data.size());
  }
};

// A figure a peer reports (seconds, cumulative): advice, never trusted, so a NaN, an infinity or a negative one
// reads as nothing.
struct TelemetryCodec {
  template <typename Wire, typename Builder>
  void Put(const Wire& wire, Builder out, double figure) const {
    wire.set(out, figure);
  }
  template <typename Wire, typename Reader>
  void Get(const Wire& wire, Reader in, double* figure) const {
    const double reported = wire.get(in);
    *figure = std::isfinite(reported) && reported > 0 ? reported : 0;
  }
};

template <typename L, typename F>
constexpr auto Nested(const L& list, F field) {
  return Recode(field, NestedCodec<L>{list});
}
template <typename L, typename F>
constexpr auto Each(const L& list, F field) {
  return Recode(field, EachCodec<L>{list});
}
template <typename Map, typename F>
constexpr auto Mapped(const Map& map, F field) {
  return Recode(field, map);
}
template <typename F>
constexpr auto Bytes(F field) {
  return Recode(field, BytesCodec());
}
template <typename F>
constexpr auto Telemetry(F field) {
  return Recode(field, TelemetryCodec());
}

// One alternative of a variant carried in a union: T's fields in the union member's own struct, or (kInline) in the
// union's struct itself, beside the member that says which alternative it is (a union member that is a Text, say).
template <typename L, typename Wire, bool kInline>
struct Alternative {
  L list;
  Wire wire;

  template <typename Builder>
  void Put(const typename L::Type& value, Builder out) const {
    if constexpr (kInline) {
      Encode(list, value, out);
    } else {
      Encode(list, value, wire.init(out));
    }
  }
  template <typename Reader>
  bool Is(Reader in) const {
    return wire.is(in);
  }
  template <typename Reader>
  Status Get(Reader in, typename L::Type* value) const {
    if constexpr (kInline) {
      return Decode(list, in, value);
    } else {
      return Decode(list, wire.get(in), value);
    }
  }
};

template <typename L, typename Wire>
constexpr Alternative<L, Wire, false> Member(const L& list, Wire wire) {
  return {list, wire};
}
template <typename L, typename Wire>
constexpr Alternative<L, Wire, true> Inline(const L& list, Wire wire) {
  return {list, wire};
}
// T itself is the union member (a JobSpec, say).
template <typename T, typename Wire>
constexpr auto Whole(Wire wire) {
  return Inline(List<T>(Bind([](auto& self) -> auto& { return self; }, wire)), wire);
}

// Writes the alternative `value` holds into the union of `out`: alternatives[i] carries the variant's i-th type.
template <typename Variant, typename Builder, typename Alternatives>
void PutVariant(const Variant& value, Builder out, const Alternatives& alternatives) {
  static_assert(std::tuple_size_v<Alternatives> == std::variant_size_v<Variant>);
  [&]<size_t... I>(std::index_sequence<I...>) {
    (void)((value.index() == I ? (std::get<I>(alternatives).Put(std::get<I>(value), out), true) : false) || ...);
  }(std::make_index_sequence<std::variant_size_v<Variant>>());
}

// Reads the union of `in` into *value; unknown() if it holds a member no alternative knows (a newer peer's).
template <typename Variant, typename Reader, typename Alternatives, typename Unknown>
Status GetVariant(Reader in, Variant* value, const Alternatives& alternatives, Unknown unknown) {
  static_assert(std::tuple_size_v<Alternatives> == std::variant_size_v<Variant>);
  Status status;
  bool known = false;
  auto get = [&]<size_t I>(std::integral_constant<size_t, I>) {
    std::variant_alternative_t<I, Variant> decoded;
    status = std::get<I>(alternatives).Get(in, &decoded);
    if (status.ok()) value->template emplace<I>(std::move(decoded));
  };
  [&]<size_t... I>(std::index_sequence<I...>) {
    known = ((std::get<I>(alternatives).Is(in) ? (get(std::integral_constant<size_t, I>()), true) : false) || ...);
  }(std::make_index_sequence<std::variant_size_v<Variant>>());
  return known ? status : unknown();
}

}  // namespace stoker::fields

// The accessors Cap'n Proto generates for the field `Name` (getName, setName, initName, isName).
#define STOKER_CAPNP_ACCESSORS(Name)                                                          \
  ::stoker::fields::MakeAccessors([](auto w) { return w.get##Name(); },                       \
                                  [](auto w, const auto& value) { w.set##Name(value); },      \
                                  [](auto w, auto... size) { return w.init##Name(size...); }, \
                                  [](auto w) { return w.is##Name(); })

// The member `member` of the list's struct, travelling in the field `Name`.
#define STOKER_FIELD(member, Name) \
  ::stoker::fields::Bind([](auto& self) -> auto& { return self.member; }, STOKER_CAPNP_ACCESSORS(Name))
