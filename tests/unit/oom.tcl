# Running out of pool space (mooncake only: Redis has no segment pool).
# With evict-policy noeviction a SET that cannot get space is refused with
# -OOM and changes nothing; with lru, old objects make room, least recently
# used first.

set MiB 1048576

start_server {tags {mooncake oom} overrides {segment-size 16mb evict-policy noeviction}} {
    set v [pattern_bytes $MiB 1]

    test {noeviction: SET beyond the pool is refused with OOM} {
        set ok 0
        set err {}
        for {set i 0} {$i < 40} {incr i} {
            if {[catch {r set fill:$i $v} err]} break
            incr ok
        }
        assert_match {OOM*} $err
        # A 16 MiB pool holds between 8 and 16 values of 1 MiB.
        assert_range $ok 8 16
        set ::filled $ok
    }

    test {noeviction: a refused SET changes nothing} {
        set n [r dbsize]
        assert_error {OOM*} {r set newkey $v}
        assert_equal $n [r dbsize]
        assert_equal 0 [r exists newkey]
        for {set i 0} {$i < $::filled} {incr i} {
            if {[r get fill:$i] ne $v} { fail "fill:$i changed" }
        }
    }

    test {noeviction: a refused overwrite keeps the old value} {
        assert_error {OOM*} {r set fill:0 [pattern_bytes [expr {2 * $MiB}] 2]}
        assert {[r get fill:0] eq $v}
    }

    test {noeviction: space comes back after DEL} {
        r del fill:0 fill:1
        assert_equal OK [r set again:0 $v]
        r get again:0
    } $v

    test {noeviction: nothing was evicted} {
        assert_equal 0 [get_info_field r store store_evictions]
        assert_equal 0 [get_info_field r stats evicted_keys]
    }

    test {A value larger than the whole pool is refused with OOM} {
        set n [r dbsize]
        assert_error {OOM*} {r set huge [pattern_bytes [expr {17 * $MiB}]]}
        assert_equal $n [r dbsize]
        assert_equal 0 [r exists huge]
    }
}

start_server {tags {mooncake oom} overrides {segment-size 16mb evict-policy lru}} {
    set v [pattern_bytes $MiB 1]

    test {lru: writes beyond the pool keep succeeding} {
        for {set i 0} {$i < 40} {incr i} {
            assert_equal OK [r set w:$i $v]
        }
        assert_morethan [get_info_field r store store_evictions] 0
        assert_morethan [get_info_field r stats evicted_keys] 0
        assert_lessthan [r dbsize] 40
        # The newest write is always there.
        assert {[r get w:39] eq $v}
    }

    test {lru: recently read keys outlive untouched ones} {
        # 64 samples per step makes the approximation exact for 20 keys: the
        # property under test, not the sampling noise.
        r config set evict-samples 64
        r flushall
        for {set i 0} {$i < 10} {incr i} { r set k:$i $v }
        assert_equal 10 [r dbsize]
        # Let the access clock move on, then read half of them.
        after 1100
        for {set i 0} {$i < 5} {incr i} { r get k:$i }
        for {set i 0} {$i < 10} {incr i} { r set n:$i $v }
        set touched 0
        set untouched 0
        for {set i 0} {$i < 5} {incr i} {
            incr touched [r exists k:$i]
            incr untouched [r exists k:[expr {$i + 5}]]
        }
        r config set evict-samples 5
        assert_morethan $touched $untouched
    }

    test {lru: a value larger than the whole pool is still refused with OOM} {
        assert_error {OOM*} {r set huge [pattern_bytes [expr {17 * $MiB}]]}
        r exists huge
    } {0}
}
