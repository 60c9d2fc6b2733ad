# Memory that adds up: INFO's memory fields include the pool (used_memory =
# heap + the pool's bytes in use), maxmemory is a real limit on the pool that
# CONFIG reads and sets, a pool larger than the machine is refused at start,
# and MEMORY USAGE (what redis-cli --memkeys ranks keys by) counts a key's
# value bytes.

set MiB 1048576

proc mem_field {name} { return [get_info_field r memory $name] }

start_server {tags {mooncake memory} overrides {segment-size 16mb}} {
    set v [pattern_bytes $MiB 3]

    test {used_memory is used_memory_heap plus used_memory_pool, and counts a new value} {
        r flushall
        set before [mem_field used_memory_pool]
        r set mem:one $v
        set pool [mem_field used_memory_pool]
        assert_morethan_equal [expr {$pool - $before}] $MiB
        assert_equal [mem_field used_memory] [expr {[mem_field used_memory_heap] + [mem_field used_memory_pool]}]
        assert_morethan [mem_field used_memory] $MiB
        assert_equal [expr {16 * $MiB}] [mem_field pool_size]
        assert_morethan [mem_field total_system_memory] 0
    }

    test {maxmemory: CONFIG GET and INFO agree; 0 means the whole pool} {
        assert_equal {maxmemory 0} [r config get maxmemory]
        assert_equal 0 [mem_field maxmemory]
        assert_equal [mem_field pool_size] [mem_field pool_limit]
        r config set maxmemory 8mb
        assert_equal [list maxmemory [expr {8 * $MiB}]] [r config get maxmemory]
        assert_equal [expr {8 * $MiB}] [mem_field maxmemory]
        assert_equal [expr {8 * $MiB}] [mem_field pool_limit]
        r config set maxmemory 0
        assert_equal [mem_field pool_size] [mem_field pool_limit]
    }

    test {maxmemory above segment-size is refused and changes nothing} {
        assert_error {*must not exceed segment-size*} {r config set maxmemory 32mb}
        assert_equal {maxmemory 0} [r config get maxmemory]
    }

    test {maxmemory caps the pool: noeviction refuses past it with OOM} {
        r flushall
        r config set maxmemory-policy noeviction
        r config set maxmemory 4mb
        set ok 0
        set err {}
        for {set i 0} {$i < 16} {incr i} {
            if {[catch {r set cap:$i $v} err]} break
            incr ok
        }
        assert_match {OOM*} $err
        assert_range $ok 2 4
        assert_lessthan_equal [mem_field used_memory_pool] [expr {4 * $MiB}]
    }

    test {maxmemory caps the pool: with allkeys-lru writes go on and the pool stays under it} {
        r config set maxmemory-policy allkeys-lru
        for {set i 0} {$i < 16} {incr i} { r set lru:$i $v }
        assert_lessthan_equal [mem_field used_memory_pool] [expr {4 * $MiB}]
        assert_equal $v [r get lru:15]
        assert_morethan [get_info_field r stats evicted_keys] 0
    }

    test {A value larger than maxmemory is refused at once, without emptying the pool} {
        # Under the high watermark, so the cron has nothing to evict either.
        r flushall
        r set keep:1 $v
        r set keep:2 $v
        set n [r dbsize]
        assert_error {OOM*} {r set huge [string repeat x [expr {5 * $MiB}]]}
        assert_equal $n [r dbsize]
        assert_equal $v [r get keep:1]
    }

    test {Lowering maxmemory under what is in use evicts down to the new limit} {
        r config set maxmemory 0
        r flushall
        for {set i 0} {$i < 8} {incr i} { r set low:$i $v }
        assert_morethan_equal [mem_field used_memory_pool] [expr {8 * $MiB}]
        r config set maxmemory 4mb
        wait_for_condition 100 50 {
            [mem_field used_memory_pool] <= 4 * $MiB
        } else {
            fail "pool still holds [mem_field used_memory_pool] bytes over a 4 MiB maxmemory"
        }
        r config set maxmemory 0
    }

    test {maxmemory-policy is Redis's name for evict-policy} {
        r config set maxmemory-policy noeviction
        assert_equal {evict-policy noeviction} [r config get evict-policy]
        assert_equal noeviction [mem_field maxmemory_policy]
        r config set evict-policy lru
        assert_equal {maxmemory-policy allkeys-lru} [r config get maxmemory-policy]
        assert_error {*allkeys-lru and noeviction*} {r config set maxmemory-policy volatile-lfu}
        assert_equal {maxmemory-policy allkeys-lru} [r config get maxmemory-policy]
    }

    test {MEMORY USAGE counts the value's bytes; nil for a missing key} {
        r flushall
        r set big $v
        r set small x
        set big [r memory usage big]
        assert_range $big $MiB [expr {$MiB + 4096}]
        assert_lessthan [r memory usage small] 4096
        assert_equal {} [r memory usage nosuchkey]
        assert_equal $big [r memory usage big SAMPLES 5]
        assert_error {*syntax*} {r memory usage big SAMPLES}
        assert_error {*syntax*} {r memory usage big FOO 1}
    }

    test {redis-cli --memkeys ranks keys by MEMORY USAGE} {
        set out [exec redis-cli -s [srv 0 unixsocket] --memkeys]
        assert_match {*Biggest string found*big*} $out
    }
}

test {A pool larger than this machine's memory is refused at start with the reason} {
    lassign [run_server_expecting_exit --port 0 --unixsocket [tmpfile mem.sock] --segment-size 64tb] exited out
    assert_equal 1 $exited
    assert_match {*segment-size 64.00T is more than this machine's*} $out
}

# One rule, one owner (store.c storeMaxmemoryInvalid): a config that sets
# maxmemory above segment-size is refused at start as CONFIG SET refuses it
# (it used to start with a warning and maxmemory silently 0).
tags {mooncake memory} {
    test {A server started with maxmemory above segment-size does not start, and says why as CONFIG SET does} {
        lassign [server_start_refusal maxmemory-start --port [find_available_port] --segment-size 1mb \
                     --maxmemory 2mb] alive out
        assert_equal 0 $alive
        assert_match "*maxmemory must not exceed segment-size*" $out
    }
}

start_server {tags {mooncake memory} overrides {segment-size 2mb maxmemory 2mb}} {
    test {maxmemory equal to segment-size starts, and is in force} {
        assert_equal [list maxmemory [expr {2 * 1024 * 1024}]] [r config get maxmemory]
        assert_equal [expr {2 * 1024 * 1024}] [mem_field pool_limit]
    }
}
