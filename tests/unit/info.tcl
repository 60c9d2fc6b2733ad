# INFO: the sections and fields that Redis tools (redis-cli, exporters,
# redis-py) read, and the counters behind them.

# The "# Name" section headers of an INFO reply, in order.
proc info_sections {text} {
    set out {}
    foreach line [split $text "\n"] {
        if {[regexp {^# (\S+)} $line -> name]} { lappend out [string tolower $name] }
    }
    return $out
}

start_server {tags {info}} {
    test {INFO has the server, clients, memory, stats and keyspace sections} {
        set sections [info_sections [r info]]
        foreach s {server clients memory stats keyspace} {
            assert {[lsearch -exact $sections $s] >= 0}
        }
    }

    test {INFO lines are field:value pairs ending in CRLF} {
        set text [r info]
        assert_match "*\r\n" $text
        foreach line [lrange [split $text "\n"] 0 end-1] {
            assert_match "*\r" $line
            set line [string trimright $line "\r"]
            if {$line eq "" || [string index $line 0] eq "#"} continue
            assert_match {?*:*} $line
        }
    }

    test {INFO section returns only that section} {
        set text [r info keyspace]
        assert_equal {keyspace} [info_sections $text]
        assert_equal {server} [info_sections [r info server]]
        assert_equal {stats} [info_sections [r info STATS]]
    }

    test {INFO with an unknown section is empty} {
        r info no-such-section
    } {}

    test {INFO all includes keyspace} {
        set sections [info_sections [r info all]]
        assert {[lsearch -exact $sections keyspace] >= 0}
        assert {[lsearch -exact $sections server] >= 0}
    }

    test {INFO server: redis_version, tcp_port, process_id, uptime} {
        assert_match {[0-9]*.[0-9]*.[0-9]*} [get_info_field r server redis_version]
        assert_equal [srv 0 port] [get_info_field r server tcp_port]
        assert_equal [srv 0 pid] [get_info_field r server process_id]
        assert_morethan_equal [get_info_field r server uptime_in_seconds] 0
    }

    test {INFO memory: used_memory} {
        set m [get_info_field r memory used_memory]
        assert {[string is wideinteger -strict $m]}
        assert_morethan $m 0
    }

    test {INFO clients: connected_clients follows connections} {
        set base [get_info_field r clients connected_clients]
        assert_morethan_equal $base 1
        set cs {}
        for {set i 0} {$i < 3} {incr i} {
            set c [redis_client]
            $c ping
            lappend cs $c
        }
        assert_equal [expr {$base + 3}] [get_info_field r clients connected_clients]
        foreach c $cs { $c close }
        wait_for_condition 50 20 {[get_info_field r clients connected_clients] == $base} else {
            fail "connected_clients did not drop back to $base"
        }
    }

    test {INFO stats: total_commands_processed counts commands} {
        set before [get_info_field r stats total_commands_processed]
        for {set i 0} {$i < 20} {incr i} { r ping }
        set after [get_info_field r stats total_commands_processed]
        assert_range [expr {$after - $before}] 20 22
    }

    test {INFO stats: keyspace_hits and keyspace_misses} {
        r set hit v
        r del nokey
        set h [get_info_field r stats keyspace_hits]
        set m [get_info_field r stats keyspace_misses]
        r get hit
        r get hit
        r get nokey
        assert_equal [expr {$h + 2}] [get_info_field r stats keyspace_hits]
        assert_equal [expr {$m + 1}] [get_info_field r stats keyspace_misses]
    }

    test {INFO stats: EXISTS counts a hit or a miss per key, as Redis} {
        r set hit v
        r del nokey
        set h [get_info_field r stats keyspace_hits]
        set m [get_info_field r stats keyspace_misses]
        assert_equal 2 [r exists hit nokey hit]
        assert_equal [expr {$h + 2}] [get_info_field r stats keyspace_hits]
        assert_equal [expr {$m + 1}] [get_info_field r stats keyspace_misses]
    }

    test {INFO stats: expired_keys and evicted_keys} {
        set e [get_info_field r stats expired_keys]
        assert {[string is integer -strict [get_info_field r stats evicted_keys]]}
        r set exp1 v PX 10
        r set exp2 v PX 10
        after 50
        r get exp1
        r get exp2
        assert_equal [expr {$e + 2}] [get_info_field r stats expired_keys]
    }

    test {INFO keyspace: db0 keys and expires} {
        r flushall
        r mset a 1 b 2 c 3
        r expire a 100
        set line [get_info_field r keyspace db0]
        assert_match {keys=3,expires=1*} $line
        r del b
        assert_match {keys=2,expires=1*} [get_info_field r keyspace db0]
        r persist a
        assert_match {keys=2,expires=0*} [get_info_field r keyspace db0]
    }

    test {INFO keyspace: db0 counts follow writes} {
        r flushall
        r mset a 1 b 2
        r set c 3 EX 100
        r set d 4 PX 100000
        assert_match {keys=4,expires=2*} [get_info_field r keyspace db0]
    }

    test {INFO keyspace: an empty keyspace has no db0 line} {
        r flushall
        get_info_field r keyspace db0
    } {}

    tags {mooncake} {
        test {INFO server: mooncake_version is ours, redis_version the protocol followed} {
            # One version everywhere: the top-level VERSION file.
            set f [open [file join $::harness(root) VERSION] r]
            set version [string trim [read $f]]
            close $f
            assert_equal $version [get_info_field r server mooncake_version]
            assert_match "*v=$version *" [exec $::harness(binary) --version]
            # redis_version is a Redis release (7.x: the protocol level whose
            # commands and replies we follow), never our own number.
            assert_match {7.*.*} [get_info_field r server redis_version]
        }

        test {INFO store: the server's own pool} {
            set text [r info store]
            assert_equal {store} [info_sections $text]
            foreach f {store_objects store_bytes store_pool_size store_pool_used
                       store_evictions store_fragmentation_ratio} {
                assert_not_equal {} [get_info_field r store $f] "field $f"
            }
            r flushall
            assert_equal 0 [get_info_field r store store_objects]
            r set so1 [string repeat x 1000]
            r set so2 [string repeat y 3000]
            assert_equal 2 [get_info_field r store store_objects]
            assert_morethan_equal [get_info_field r store store_bytes] 4000
            assert_morethan_equal [get_info_field r store store_pool_used] 4000
            assert_morethan [get_info_field r store store_pool_size] \
                [get_info_field r store store_pool_used]
            r del so1 so2
            assert_equal 0 [get_info_field r store store_objects]
            assert_equal 0 [get_info_field r store store_bytes]
        }

        test {INFO default and all include the store section} {
            assert {[lsearch -exact [info_sections [r info]] store] >= 0}
            assert {[lsearch -exact [info_sections [r info all]] store] >= 0}
        }
    }
}

start_server {tags {info}} {
    test {INFO persistence and replication: nothing loading or saving, a primary without replicas} {
        assert_equal 0 [get_info_field r persistence loading]
        assert_equal 0 [get_info_field r persistence rdb_bgsave_in_progress]
        assert_equal 0 [get_info_field r persistence aof_enabled]
        assert_equal master [get_info_field r replication role]
        assert_equal 0 [get_info_field r replication connected_slaves]
        set sections [info_sections [r info]]
        foreach s {persistence replication errorstats} {
            assert {[lsearch -exact $sections $s] >= 0}
        }
        # As Redis: latencystats and commandstats only when asked for.
        assert_equal -1 [lsearch -exact $sections latencystats]
        assert {[lsearch -exact [info_sections [r info everything]] latencystats] >= 0}
    }

    test {INFO errorstats counts error replies by their first word; CONFIG RESETSTAT clears them} {
        r config resetstat
        catch {r nosuchcommand}
        catch {r nosuchcommand}
        catch {r get}
        set info [r info errorstats]
        assert_match "*errorstat_ERR:count=3*" $info
        r config resetstat
        assert_no_match "*errorstat_ERR*" [r info errorstats]
    }

    test {INFO latencystats: p50, p99 and p99.9 per command; the percentiles and tracking are configurable} {
        r config resetstat
        r set lat:k v
        r get lat:k
        set info [r info latencystats]
        assert_match "*latency_percentiles_usec_set:p50=*,p99=*,p99.9=*" $info
        assert {[regexp {latency_percentiles_usec_get:p50=([0-9.]+),p99=([0-9.]+),p99.9=([0-9.]+)} $info -> p50 p99 p999]}
        assert {$p50 <= $p99 && $p99 <= $p999}
        r config set latency-tracking-info-percentiles "50 90"
        assert_match "*latency_percentiles_usec_get:p50=*,p90=*" [r info latencystats]
        assert_no_match "*p99*" [r info latencystats]
        r config set latency-tracking-info-percentiles "50 99 99.9"
        assert_error {*} {r config set latency-tracking-info-percentiles "101"}
        r config resetstat
        r config set latency-tracking no
        r get lat:k
        assert_no_match "*usec_get*" [r info latencystats]
        r config set latency-tracking yes
    }
}

start_server {tags {info mooncake}} {
    test {INFO errorstats counts the store's own error words} {
        r config resetstat
        catch {r put.end no-such-key}
        catch {r put.revoke no-such-key}
        assert_match "*errorstat_NOKEY:count=2*" [r info errorstats]
    }
}
