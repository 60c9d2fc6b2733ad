# Regressions for store bugs found in review: each reproduces a failure the
# server once had, so each must fail on that code.

proc sr_info {field} { get_info_field r store $field }

start_server {tags {mooncake store} overrides {segment-size 16mb lease-ttl 500}} {
    test {A slot's generation never wraps onto a leased, removed object} {
        set c [redis_client]
        $c mount gw-a 1mb OWNER gw
        $c put.start gw:k 4096 PREFER gw-a
        $c put.end gw:k
        $c get.replicas gw:k
        $c remove gw:k
        $c unmount gw-a
        # 65535 more mounts of the same slot: its 16-bit generation runs out.
        set d [redis_deferring_client]
        for {set i 0} {$i < 65535} {incr i} {
            $d write [::redis::format_command mount gw-b$i 4096 OWNER gw]
            $d write [::redis::format_command unmount gw-b$i]
            if {$i % 1000 == 999} {
                $d flush
                for {set j 0} {$j < 2000} {incr j} { $d read }
            }
        }
        $d flush
        for {set j 0} {$j < 1070} {incr j} { $d read }
        $d close
        $c mount gw-c 1mb OWNER gw
        $c put.start gw:x 4096 PREFER gw-c
        $c put.end gw:x
        # The removed object's lease ends; its free must not touch gw-c.
        after 1200
        assert_equal 4096 [dict get [$c segment.info gw-c] used]
        assert_equal 1 [dict get [$c segment.info gw-c] objects]
        $c unmount gw-c
        $c close
    }

    test {An object that no segment's allocator can hold evicts nothing} {
        r flushall
        r config set evict-policy lru
        for {set i 0} {$i < 100} {incr i} { r set fit:$i [string repeat x 1000] }
        set c [redis_client]
        # Not a multiple of the 16-byte granule: capacity is 8 bytes short.
        $c mount fit-a 20971528 OWNER fit
        assert_error {NOSPACE*} {r put.start fit:big 20971528}
        assert_equal 100 [r dbsize]
        $c unmount fit-a
        $c close
    }

    test {Durations far in the future saturate instead of wrapping} {
        r set ov:s x
        set c [redis_client]
        $c mount ov-a 1mb OWNER ov
        assert_equal 0 [r unmount ov-a GRACEFUL 9223372036854775807]
        after 400
        assert_equal draining [dict get [r segment.info ov-a] state]
        # Re-issuing cannot postpone a closer deadline, and can bring it in.
        r unmount ov-a GRACEFUL 0
        wait_for_condition 40 50 {[r segment.info ov-a] eq ""} else { fail "not unmounted" }
        r config set lease-ttl 9223372036854775807
        assert_morethan [lindex [r get.replicas ov:s] 0] 1000000000
        r config set lease-ttl 500
        r config set max-soft-pin-ttl 9223372036854775807
        r pin ov:s 9223372036854775807
        assert_equal soft [dict get [r object.info ov:s] pin]
        r config set max-soft-pin-ttl 86400000
        r unpin ov:s
        $c close
    }
}

start_server {tags {mooncake store} overrides {segment-size 16mb evict-high-watermark 1.0 evict-policy lru}} {
    test {Eviction for the pool takes only objects in the pool} {
        set c [redis_client]
        $c mount ev-a 64mb OWNER ev
        for {set i 0} {$i < 1000} {incr i} {
            r put.start ev:a$i 4096 PREFER ev-a
            r put.end ev:a$i
        }
        set mib [string repeat y 1048576]
        for {set i 0} {$i < 14} {incr i} { r set ev:s$i $mib }
        assert_equal OK [r set ev:big [string repeat z [expr {3 * 1048576}]]]
        assert_equal 1000 [dict get [r segment.info ev-a] objects]
        assert_morethan [get_info_field r stats evicted_keys] 0
        $c unmount ev-a
        $c close
    }

    test {HEARTBEAT of a name with a NUL does not match a shorter owner} {
        set c [redis_client]
        $c mount hb-a 1mb OWNER hb
        assert_equal OK [r heartbeat hb]
        assert_error {NEEDREMOUNT*} {r heartbeat "hb\x00junk"}
        $c unmount hb-a
        $c close
    }
}
