# min_budget.sh - sourced by the benches that start from the ilp's smallest
# all-device budget: builds ration and build/min_budget (bench/min_budget.c)
# and sets device_file from $device (a profile name or a device file).
make -s all
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Icompiler -Iruntime -Wall -Wextra -Werror bench/min_budget.c \
  build/rel/libration-compiler.a build/rel/libration.a -lglpk -lcjson -lnettle -lm -lpthread \
  -o build/min_budget || exit 2
case "$device" in */*|*.json) device_file=$device;; *) device_file=budgets/$device.json;; esac
