# ab_build.sh - sourced by the benches that train two schedules in one
# process (bench/ab_steps.c): the schedule's entry name and the build line,
# kept in one place so both benches link the same way.
# Needs BUILD (the folder holding libration.a).

sched_id() { basename "$1" | tr -c 'A-Za-z0-9\n' '_'; }

ab_build() { # schedule A base path, schedule B base path, binary
  cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime -DSCHED_A="ration_schedule_$(sched_id "$1")" \
    -DSCHED_B="ration_schedule_$(sched_id "$2")" -o "$3" bench/ab_steps.c "$1.sched.c" "$2.sched.c" \
    "$BUILD/libration.a" -lm -lpthread
}
