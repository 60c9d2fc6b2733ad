# Which clock each timer runs on. Absolute times (key expiries, EXPIREAT,
# creation times the log keeps) are the wall clock's, as in Redis; every
# relative timeout -- a read lease, a removed version waiting for its lease,
# a soft pin, REPLICA.CLEAR's lease-ttl after a put, an object's idle time,
# a pending put's put-timeout and the pending sweep, owner-ttl, an UNMOUNT
# GRACEFUL drain, a client's idle `timeout`, WAIT's timeout, and the
# replication, cluster and relay timeouts -- runs on the monotonic clock, so
# a wall-clock step (NTP, an operator's date) neither ends them all at once
# nor stalls them.
#
# DEBUG WALLCLOCK-STEP moves the server's wall clock alone, as such a step
# would. Every "nothing happened" below is checked after full cron ticks
# (wait_cron_ticks), never by waiting a time.

proc ck_lease {key} {
    set i [r object.info $key]
    if {$i eq ""} { return {} }
    dict get $i lease-ms
}

start_server {tags {mooncake lease} overrides {segment-size 16mb lease-ttl 10000 owner-probe-timeout 0}} {
    test {DEBUG WALLCLOCK-STEP: integers in range only} {
        assert_error {ERR*} {r debug wallclock-step abc}
        assert_error {ERR*} {r debug wallclock-step 1000000000001}
        assert_error {ERR*} {r debug wallclock-step -1000000000001}
        assert_equal OK [r debug wallclock-step 0]
    }

    test {A wall-clock step forward expires keys (absolute times) but ends no lease} {
        r set ck:ttl v
        r expire ck:ttl 3600
        r set ck:lease v
        assert_range [r lease ck:lease 600000] 590000 600000
        r set ck:read v
        r get.replicas ck:read
        assert_equal OK [r debug wallclock-step 86400000]
        # Redis's semantics: an expiry is a wall-clock time.
        assert_equal 0 [r exists ck:ttl]
        assert_range [ck_lease ck:lease] 590000 600000
        assert_range [ck_lease ck:read] 9000 10000
    }

    test {A wall-clock step forward frees no version still waiting for its lease} {
        r set ck:defer v
        assert_range [r lease ck:defer 600000] 590000 600000
        set waiting0 [get_info_field r store store_deferred_frees]
        set expired0 [get_info_field r store store_lease_expiries]
        r set ck:defer w ;# the leased version is removed: it waits for its lease
        assert_equal [expr {$waiting0 + 1}] [get_info_field r store store_deferred_frees]
        assert_equal OK [r debug wallclock-step 86400000]
        wait_cron_ticks 2
        assert_equal [expr {$waiting0 + 1}] [get_info_field r store store_deferred_frees]
        assert_equal $expired0 [get_info_field r store store_lease_expiries]
    }

    test {A wall-clock step back does not stall a lease} {
        r set ck:back v
        assert_range [r lease ck:back 300] 1 300
        assert_equal OK [r debug wallclock-step -86400000]
        assert_range [ck_lease ck:back] 0 300
        wait_for_condition 100 50 {[ck_lease ck:back] == 0} else {
            fail "a 300 ms lease still runs: [ck_lease ck:back] ms left"
        }
    }

    test {A wall-clock step forward neither times out a pending put nor has the sweep reclaim it} {
        r config set put-timeout 600000
        set writer [redis_client]
        $writer put.start ck:put 4096
        assert_equal OK [r debug wallclock-step 86400000]
        # put-timeout has not run out: no one takes the put over.
        set other [redis_client]
        assert_error {*EXISTS*} {$other put.start ck:put 4096}
        # A connection with a pending put closes: the sweep passes over the
        # whole pending table at once. Only that connection's put goes.
        set reclaimed0 [get_info_field r store store_pending_reclaimed]
        set quitter [redis_client]
        $quitter put.start ck:quit 4096
        $quitter close
        wait_for_condition 100 20 {[get_info_field r store store_pending_reclaimed] > $reclaimed0} else {
            fail "the closed connection's put was not reclaimed"
        }
        wait_cron_ticks 1
        assert_equal [expr {$reclaimed0 + 1}] [get_info_field r store store_pending_reclaimed]
        assert_equal OK [$writer put.end ck:put]
        assert_equal 1 [r exists ck:put]
        # What the object shows as its creation is a wall-clock time: after the step.
        assert_morethan [dict get [r object.info ck:put] created] [expr {[clock milliseconds] + 86000000}]
        $writer close
        $other close
    }

    test {A wall-clock step forward neither kills an orphaned owner (owner-ttl) nor ends a drain} {
        r config set owner-ttl 600000
        set host [redis_client]
        $host mount ck-orphan 4096 OWNER ck-orphan-owner
        $host close
        wait_for_condition 100 20 {[dict get [r segment.info ck-orphan] state] eq "orphaned"} else {
            fail "the segment's owner did not become an orphan"
        }
        r mount ck-drain 4096 OWNER ck-drain-owner
        assert_equal 0 [r unmount ck-drain graceful 600000]
        set lost0 [get_info_field r segments owners_lost_by_ttl]
        assert_equal OK [r debug wallclock-step 86400000]
        wait_cron_ticks 2
        assert_equal orphaned [dict get [r segment.info ck-orphan] state]
        assert_equal $lost0 [get_info_field r segments owners_lost_by_ttl]
        assert_equal draining [dict get [r segment.info ck-drain] state]
        assert_equal 0 [r unmount ck-drain]
    }
}

start_server {tags {mooncake}} {
    test {A wall-clock step forward closes no idle client before `timeout`} {
        r config set timeout 600
        set c [redis_client]
        assert_equal PONG [$c ping]
        assert_equal OK [r debug wallclock-step 86400000]
        wait_cron_ticks 2
        assert_equal PONG [$c ping]
        $c close
        r config set timeout 0
    }

    test {A wall-clock step forward ends no WAIT before its timeout} {
        set d [redis_deferring_client]
        $d wait 1 600000
        wait_for_condition 100 20 {[get_info_field r clients blocked_clients] == 1} else {
            fail "WAIT did not block"
        }
        assert_equal OK [r debug wallclock-step 86400000]
        wait_cron_ticks 2
        assert_equal 1 [get_info_field r clients blocked_clients]
        $d close
        wait_for_condition 100 20 {[get_info_field r clients blocked_clients] == 0} else {
            fail "the closed WAIT is still counted"
        }
    }
}

# A soft pin is for ms (PIN key ms, PUT.START PIN) and REPLICA.CLEAR
# leaves an object alone for lease-ttl after its put: both are ages, and
# were counted on the wall clock (a step forward ended every soft pin at
# once and made new objects clearable; a step back stretched both).
start_server {tags {mooncake lease} overrides {segment-size 16mb lease-ttl 10000}} {
    test {A wall-clock step neither ends a soft pin nor stretches it} {
        r set ck:pin v
        assert_equal OK [r pin ck:pin 600000]
        assert_equal OK [r debug wallclock-step 86400000]
        set i [r object.info ck:pin]
        assert_equal soft [dict get $i pin]
        assert_range [dict get $i pin-ms] 590000 600000
        assert_equal OK [r debug wallclock-step -172800000]
        assert_range [dict get [r object.info ck:pin] pin-ms] 590000 600000
        assert_equal OK [r debug wallclock-step 86400000]
        # DUMP carries the time left, whatever the steps did.
        r restore ck:pin2 0 [r dump ck:pin]
        assert_range [dict get [r object.info ck:pin2] pin-ms] 590000 600000
    }

    test {A wall-clock step forward does not age a new object for REPLICA.CLEAR} {
        r config set lease-ttl 600000
        r put.start ck:young 4096
        r put.end ck:young
        assert_equal OK [r debug wallclock-step 86400000]
        assert_equal 0 [r replica.clear 1 ck:young]
        assert_equal 1 [r exists ck:young]
        assert_equal OK [r debug wallclock-step -86400000]
    }

    test {A wall-clock step back does not keep a new object young for REPLICA.CLEAR} {
        r config set lease-ttl 100
        r put.start ck:old 4096
        r put.end ck:old
        assert_equal OK [r debug wallclock-step -86400000]
        wait_for_condition 100 50 {[r replica.clear 1 ck:old] == 1} else {
            fail "an object 100 ms of lease-ttl old stays young"
        }
        assert_equal 0 [r exists ck:old]
        assert_equal OK [r debug wallclock-step 86400000]
        r config set lease-ttl 10000
    }
}

# An idle time is an age too: the LRU clock (o->lru) was the wall clock's,
# so after a step back every object touched before it looked accessed in
# the future -- OBJECT IDLETIME about 49 days, and eviction, which compares
# signed 32-bit ages, took the most recently used first.
start_server {tags {mooncake}} {
    test {A wall-clock step back neither makes objects look idle for weeks nor reorders the LRU} {
        r set ck:lru v
        r put.start ck:lruobj 100
        r put.end ck:lruobj
        assert_equal OK [r debug wallclock-step -86400000]
        assert_range [r object idletime ck:lru] 0 5
        assert_range [dict get [r object.info ck:lruobj] last-access-ms] 0 5000
        # RESTORE IDLETIME counts back from the same clock.
        r restore ck:idle 0 [r dump ck:lru] IDLETIME 1000
        assert_range [r object idletime ck:idle] 1000 1005
        assert_equal OK [r debug wallclock-step 86400000]
        assert_range [r object idletime ck:lru] 0 5
    }
}

# INFO's ages: uptime and the instantaneous rates, which were measured on
# the wall clock (after a step back uptime went negative, and the rates
# froze: every sample was "less than 100 ms" after the last one).
start_server {tags {mooncake info}} {
    test {A wall-clock step back neither makes uptime negative nor freezes the instantaneous rates} {
        # A fresh server: no traffic sampled yet (16 samples, one per 100 ms).
        wait_for_condition 100 50 {[s instantaneous_ops_per_sec] == 0} else {
            fail "instantaneous_ops_per_sec never fell to 0"
        }
        assert_equal OK [r debug wallclock-step -86400000]
        assert {[s uptime_in_seconds] >= 0}
        wait_for_condition 100 50 {
            [for {set i 0} {$i < 100} {incr i} { r ping }; s instantaneous_ops_per_sec] > 0
        } else {
            fail "instantaneous_ops_per_sec stayed 0 under traffic after the step"
        }
        assert_equal OK [r debug wallclock-step 86400000]
    }
}
