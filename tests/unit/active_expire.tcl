# The active expiry cycle (store.c): keys whose TTL passed are reclaimed
# without anyone touching them, in bounded work per tick, and none is left
# behind when they are a small share of the keys with a TTL. Counted with
# INFO expired_keys and DEBUG VISITS expire (TTL entries looked at) per
# cron tick (wait_cron_ticks, cron-ticks), nothing timed.

start_server {tags {mooncake expire} overrides {hz 10}} {
    test {Keys that expire together are all reclaimed, even as a small share of the keys with a TTL} {
        # 8000 keys that live an hour, 800 that expire at once (9 %). A
        # random sampler that stops once a sample is under a quarter expired
        # reclaimed about two a tick and left the rest, values and all.
        for {set i 0} {$i < 8000} {incr i} { r set ae:long:$i v EX 3600 }
        set expired0 [get_info_field r stats expired_keys]
        for {set i 0} {$i < 800} {incr i} { r set ae:short:$i v PX 1 }
        # A pass over 8800 keys at 320 a tick at least: under 30 ticks.
        wait_cron_ticks 40
        assert_equal [expr {$expired0 + 800}] [get_info_field r stats expired_keys]
        assert_equal 8000 [r dbsize]
    }

    test {With nothing to expire, a tick looks at a bounded number of TTL entries} {
        assert_equal OK [r debug visits reset]
        wait_cron_ticks 3
        set ticks [dict get [r debug visits] cron-ticks]
        assert_morethan_equal $ticks 3
        # 16 scan steps a tick of about 20 entries each (a bucket's chain
        # may add a few), however many keys have a TTL.
        assert_lessthan_equal [dict get [r debug visits] expire] [expr {$ticks * 400}]
    }
}
