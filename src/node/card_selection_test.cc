#include "src/node/card_selection.h"

#include <gtest/gtest.h>

namespace gs::node {
namespace {

std::vector<platform::GpuInfo> ThreeCards() {
  std::vector<platform::GpuInfo> cards(3);
  for (int i = 0; i < 3; ++i) {
    cards[i].index = i;
    cards[i].uuid = "GPU-" + std::to_string(i);
    cards[i].memory_total = 80ull << 30;
  }
  return cards;
}

std::vector<std::string> Uuids(const CardSelection& s) {
  std::vector<std::string> out;
  for (const auto& g : s.cards) out.push_back(g.uuid);
  return out;
}

TEST(CardSelection, ExcludedCardsByUuidOrIndexAreNotRegistered) {
  Config cfg;
  cfg.exclude_devices = {"GPU-2", "0"};
  CardSelection s = SelectCards(cfg, ThreeCards());
  EXPECT_EQ(Uuids(s), (std::vector<std::string>{"GPU-1"}));
  ASSERT_EQ(s.infos.size(), 2u);
  EXPECT_NE(s.infos[0].find("card 0 (GPU-0) is not registered: excluded by '0'"), std::string::npos) << s.infos[0];
  EXPECT_TRUE(s.warnings.empty());
}

TEST(CardSelection, AnExclusionMatchingNoCardIsAWarning) {
  Config cfg;
  cfg.exclude_devices = {"GPU-9", "7", "1"};
  CardSelection s = SelectCards(cfg, ThreeCards());
  EXPECT_EQ(Uuids(s), (std::vector<std::string>{"GPU-0", "GPU-2"}));
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_EQ(s.warnings[0], "--exclude-devices: 'GPU-9' matches no card on this node");
  EXPECT_EQ(s.warnings[1], "--exclude-devices: '7' matches no card on this node");
}

TEST(CardSelection, ACardWithoutNvmlMemoryNeedsPreConfiguredMemory) {
  auto cards = ThreeCards();
  cards[1].memory_info_supported = false;
  cards[1].memory_total = 0;
  Config cfg;
  CardSelection s = SelectCards(cfg, cards);
  EXPECT_EQ(Uuids(s), (std::vector<std::string>{"GPU-0", "GPU-2"}));
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_NE(s.errors[0].find("card 1 (GPU-1) is not registered: NVML cannot report its memory"), std::string::npos);
  EXPECT_NE(s.errors[0].find("--pre-configured-device-memory"), std::string::npos);

  cfg.pre_configured_device_memory = 120ull << 30;
  s = SelectCards(cfg, cards);
  ASSERT_EQ(s.cards.size(), 3u);
  EXPECT_EQ(s.cards[1].memory_total, 120ull << 30);
  EXPECT_EQ(s.cards[0].memory_total, 80ull << 30);  // only where NVML cannot say
  ASSERT_EQ(s.warnings.size(), 1u);
  EXPECT_NE(s.warnings[0].find("registering 122880 MiB"), std::string::npos) << s.warnings[0];
}

}  // namespace
}  // namespace gs::node
