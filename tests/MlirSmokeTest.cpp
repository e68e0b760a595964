#include "attnc/codegen/MlirSmoke.h"

#include <gtest/gtest.h>

TEST(MlirSmoke, BuildsAndVerifiesAnEmptyModule) {
  std::string text = attnc::mlirbridge::buildEmptyModule();
  EXPECT_NE(text.find("module"), std::string::npos) << text;
}
