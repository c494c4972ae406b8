CREATE OR REPLACE FUNCTION hivenet._fast_system(p_a text, p_b text, p_c text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN (((((p_a || ' '::text) || p_b) || ' '::text) || p_c) ~ '^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$'::text) THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND ((p_c)::numeric >= (1)::numeric)) THEN ((((p_a || p_b) || p_c) || to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYYYMMDD'::text)) || NULLIF(NULLIF(to_char(GREATEST((nextval(to_regclass((((('hivenet."seq_system_'::text || p_a) || p_b) || p_c) || '"'::text))) - ((((statement_timestamp() AT TIME ZONE 'UTC'::text))::date - '1999-12-31'::date) * '100000000000000'::bigint)), (0)::bigint), 'FM000000000000'::text), '000000000000'::text), '############'::text))
                 ELSE NULL::text
             END
             ELSE NULL::text
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._fast_time_id(p_format text, p_fields jsonb)
 RETURNS bigint
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'time_id'::text THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND (COALESCE(p_fields, '{}'::jsonb) = '{}'::jsonb)) THEN (((to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYMMDDHH24MISS'::text))::bigint << 14) | NULLIF((LEAST(GREATEST((nextval(to_regclass('hivenet."seq_time_id_"'::text)) - (((floor(date_part('epoch'::text, (statement_timestamp() AT TIME ZONE 'UTC'::text))))::bigint - 946684799) * (1000000000)::bigint)), (0)::bigint), (16384)::bigint) % (16384)::bigint), 0))
                 ELSE NULL::bigint
             END
             ELSE NULL::bigint
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._fast_unified(p_a text, p_b text, p_c text)
 RETURNS text
 LANGUAGE sql
BEGIN ATOMIC
 SELECT
         CASE
             WHEN (((((p_a || ' '::text) || p_b) || ' '::text) || p_c) ~ '^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$'::text) THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND ((p_c)::numeric >= (1)::numeric)) THEN ((((p_a || p_b) || p_c) || to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYYYMMDD'::text)) || NULLIF(NULLIF(to_char(GREATEST((nextval(to_regclass((((('hivenet."seq_unified_'::text || p_a) || p_b) || p_c) || '"'::text))) - ((((statement_timestamp() AT TIME ZONE 'UTC'::text))::date - '1999-12-31'::date) * '100000000000000'::bigint)), (0)::bigint), 'FM0000000000'::text), '0000000000'::text), '##########'::text))
                 ELSE NULL::text
             END
             ELSE NULL::text
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._format_constant(p_name text)
 RETURNS hivenet.format
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_name
             WHEN 'id_service'::text THEN '(id_service,"[{""field"": ""merchant"", ""regex"": ""^[0-9]{12}$"", ""width"": 12, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""field"": ""shard"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""seq"": 6, ""reset"": ""day""}]",28,"{merchant,shard}",6,day,999999,100000000000000,f,t,"unified ID service (seed 001): merchant + date + shard + daily sequence per merchant and shard","^[0-9]{12} [0-9]{2}$","{NULL,NULL}","{NULL,NULL}",{},"""%1$s""YYYYMMDD""%2$s""","",,,)'::hivenet.format
             WHEN 'interface'::text THEN '(interface,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""field"": ""target"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum"", ""counter"": false}, {""time"": ""YYYYMMDDHHMISS"", ""width"": 14, ""to_char"": ""YYYYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 10, ""reset"": ""day""}]",39,"{system,module,instance,target}",10,day,9999999999,100000000000000,f,t,"interface serial (接口流水号): one interface call","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2} [0-9A-Za-z]{5}$","{NULL,NULL,1,NULL}","{NULL,NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""""%4$s""YYYYMMDDHH24MISS","","{1,2,3}",second,)'::hivenet.format
             WHEN 'merchant_trade'::text THEN '(merchant_trade,"[{""field"": ""merchant"", ""regex"": ""^[0-9]{12}$"", ""width"": 12, ""charset"": ""digit""}, {""time"": ""YYYYMMDDHHMISS"", ""width"": 14, ""to_char"": ""YYYYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 6, ""reset"": ""day""}]",32,{merchant},6,day,999999,100000000000000,f,t,"merchant trade number: merchant + date-time + daily sequence",^[0-9]{12}$,{NULL},{NULL},{},"""%1$s""YYYYMMDDHH24MISS","",,second,)'::hivenet.format
             WHEN 'per_second'::text THEN '(per_second,"[{""time"": ""yyMMddHHmmss"", ""width"": 12, ""to_char"": ""YYMMDDHH24MISS"", ""resolution"": ""second""}, {""seq"": 5, ""reset"": ""second""}]",17,{},5,second,99999,1000000000,f,t,"time-based serial: yyMMddHHmmss + per-second sequence",^$,{},{},{},YYMMDDHH24MISS,"",,,)'::hivenet.format
             WHEN 'system'::text THEN '(system,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""seq"": 12, ""reset"": ""day""}]",30,"{system,module,instance}",12,day,999999999999,100000000000000,f,t,"system serial (系统流水号): one processing step; retries reuse it","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$","{NULL,NULL,1}","{NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""YYYYMMDD","",,,)'::hivenet.format
             WHEN 'time_id'::text THEN '(time_id,"[{""time"": ""yyMMddHHmmss"", ""width"": 12, ""to_char"": ""YYMMDDHH24MISS"", ""resolution"": ""second""}, {""reset"": ""second"", ""seq_bits"": 14}]",54,{},14,second,16383,1000000000,f,t,"time id (seed 004): a bigint, (yyMMddHHmmss << 14) | per-second sequence",^$,{},{},{},YYMMDDHH24MISS,"",,,14)'::hivenet.format
             WHEN 'unified'::text THEN '(unified,"[{""field"": ""system"", ""regex"": ""^[0-9A-Za-z]{5}$"", ""width"": 5, ""charset"": ""alnum""}, {""field"": ""module"", ""regex"": ""^[0-9A-Za-z]{3}$"", ""width"": 3, ""charset"": ""alnum""}, {""min"": 1, ""field"": ""instance"", ""regex"": ""^[0-9]{2}$"", ""width"": 2, ""charset"": ""digit""}, {""time"": ""YYYYMMDD"", ""width"": 8, ""to_char"": ""YYYYMMDD"", ""resolution"": ""day""}, {""seq"": 10, ""reset"": ""day""}]",28,"{system,module,instance}",10,day,9999999999,100000000000000,f,t,"unified serial (统一流水号): one business transaction across all systems","^[0-9A-Za-z]{5} [0-9A-Za-z]{3} [0-9]{2}$","{NULL,NULL,1}","{NULL,NULL,NULL}",{3},"""%1$s""""%2$s""""%3$s""YYYYMMDD","",,,)'::hivenet.format
             ELSE NULL::hivenet.format
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._serial_field(p_format text, p_serial text, p_field text)
 RETURNS text
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'id_service'::text THEN
             CASE p_field
                 WHEN 'merchant'::text THEN substr(p_serial, 1, 12)
                 WHEN 'shard'::text THEN substr(p_serial, 21, 2)
                 ELSE NULL::text
             END
             WHEN 'interface'::text THEN
             CASE p_field
                 WHEN 'instance'::text THEN substr(p_serial, 9, 2)
                 WHEN 'module'::text THEN substr(p_serial, 6, 3)
                 WHEN 'system'::text THEN substr(p_serial, 1, 5)
                 WHEN 'target'::text THEN substr(p_serial, 11, 5)
                 ELSE NULL::text
             END
             WHEN 'merchant_trade'::text THEN
             CASE p_field
                 WHEN 'merchant'::text THEN substr(p_serial, 1, 12)
                 ELSE NULL::text
             END
             WHEN 'per_second'::text THEN
             CASE p_field
                 WHEN NULL::text THEN NULL::text
                 ELSE NULL::text
             END
             WHEN 'system'::text THEN
             CASE p_field
                 WHEN 'instance'::text THEN substr(p_serial, 9, 2)
                 WHEN 'module'::text THEN substr(p_serial, 6, 3)
                 WHEN 'system'::text THEN substr(p_serial, 1, 5)
                 ELSE NULL::text
             END
             WHEN 'unified'::text THEN
             CASE p_field
                 WHEN 'instance'::text THEN substr(p_serial, 9, 2)
                 WHEN 'module'::text THEN substr(p_serial, 6, 3)
                 WHEN 'system'::text THEN substr(p_serial, 1, 5)
                 ELSE NULL::text
             END
             ELSE (hivenet.parse_serial(p_serial, p_format) ->> p_field)
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._serial_scope(p_format text, p_serial text)
 RETURNS text
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'id_service'::text THEN (substr(p_serial, 1, 12) || substr(p_serial, 21, 2))
             WHEN 'interface'::text THEN ((substr(p_serial, 1, 5) || substr(p_serial, 6, 3)) || substr(p_serial, 9, 2))
             WHEN 'merchant_trade'::text THEN substr(p_serial, 1, 12)
             WHEN 'per_second'::text THEN ''::text
             WHEN 'system'::text THEN ((substr(p_serial, 1, 5) || substr(p_serial, 6, 3)) || substr(p_serial, 9, 2))
             WHEN 'unified'::text THEN ((substr(p_serial, 1, 5) || substr(p_serial, 6, 3)) || substr(p_serial, 9, 2))
             ELSE NULL::text
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._serial_shaped(p_format text, p_serial text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'id_service'::text THEN ((length(p_serial) = 28) AND (p_serial ~ '^[0-9]*$'::text))
             WHEN 'interface'::text THEN ((length(p_serial) = 39) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]{2}[0-9A-Za-z]{5}[0-9]*$'::text))
             WHEN 'merchant_trade'::text THEN ((length(p_serial) = 32) AND (p_serial ~ '^[0-9]*$'::text))
             WHEN 'per_second'::text THEN ((length(p_serial) = 17) AND (p_serial ~ '^[0-9]*$'::text))
             WHEN 'system'::text THEN ((length(p_serial) = 30) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]*$'::text))
             WHEN 'unified'::text THEN ((length(p_serial) = 28) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]*$'::text))
             ELSE NULL::boolean
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._serial_time(p_format text, p_serial text)
 RETURNS timestamp without time zone
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'id_service'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 28) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((substr(p_serial, 13, 4) <> '0000'::text) AND (((substr(p_serial, 17, 2))::integer >= 1) AND ((substr(p_serial, 17, 2))::integer <= 12)) AND ((substr(p_serial, 19, 2))::integer >= 1) AND (((substr(p_serial, 19, 2))::integer <= 28) OR ((substr(p_serial, 19, 2))::integer <=
                     CASE (substr(p_serial, 17, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 13, 4))::integer % 4) = 0) AND ((((substr(p_serial, 13, 4))::integer % 100) <> 0) OR (((substr(p_serial, 13, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 17, 2))::integer + ((substr(p_serial, 17, 2))::integer / 8)) % 2))
                     END)) AND (substr(p_serial, 23, 6) <> '000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 13, 4))::integer, (substr(p_serial, 17, 2))::integer, (substr(p_serial, 19, 2))::integer, 0, 0, (0)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'interface'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 39) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]{2}[0-9A-Za-z]{5}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 16, 4) <> '0000'::text) AND (((substr(p_serial, 20, 2))::integer >= 1) AND ((substr(p_serial, 20, 2))::integer <= 12)) AND ((substr(p_serial, 22, 2))::integer >= 1) AND (((substr(p_serial, 22, 2))::integer <= 28) OR ((substr(p_serial, 22, 2))::integer <=
                     CASE (substr(p_serial, 20, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 16, 4))::integer % 4) = 0) AND ((((substr(p_serial, 16, 4))::integer % 100) <> 0) OR (((substr(p_serial, 16, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 20, 2))::integer + ((substr(p_serial, 20, 2))::integer / 8)) % 2))
                     END)) AND ((substr(p_serial, 24, 2))::integer < 24) AND ((substr(p_serial, 26, 2))::integer < 60) AND ((substr(p_serial, 28, 2))::integer < 60) AND (substr(p_serial, 30, 10) <> '0000000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 16, 4))::integer, (substr(p_serial, 20, 2))::integer, (substr(p_serial, 22, 2))::integer, (substr(p_serial, 24, 2))::integer, (substr(p_serial, 26, 2))::integer, ((substr(p_serial, 28, 2))::integer)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'merchant_trade'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 32) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((substr(p_serial, 13, 4) <> '0000'::text) AND (((substr(p_serial, 17, 2))::integer >= 1) AND ((substr(p_serial, 17, 2))::integer <= 12)) AND ((substr(p_serial, 19, 2))::integer >= 1) AND (((substr(p_serial, 19, 2))::integer <= 28) OR ((substr(p_serial, 19, 2))::integer <=
                     CASE (substr(p_serial, 17, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 13, 4))::integer % 4) = 0) AND ((((substr(p_serial, 13, 4))::integer % 100) <> 0) OR (((substr(p_serial, 13, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 17, 2))::integer + ((substr(p_serial, 17, 2))::integer / 8)) % 2))
                     END)) AND ((substr(p_serial, 21, 2))::integer < 24) AND ((substr(p_serial, 23, 2))::integer < 60) AND ((substr(p_serial, 25, 2))::integer < 60) AND (substr(p_serial, 27, 6) <> '000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 13, 4))::integer, (substr(p_serial, 17, 2))::integer, (substr(p_serial, 19, 2))::integer, (substr(p_serial, 21, 2))::integer, (substr(p_serial, 23, 2))::integer, ((substr(p_serial, 25, 2))::integer)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'per_second'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 17) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((((substr(p_serial, 3, 2))::integer >= 1) AND ((substr(p_serial, 3, 2))::integer <= 12)) AND ((substr(p_serial, 5, 2))::integer >= 1) AND (((substr(p_serial, 5, 2))::integer <= 28) OR ((substr(p_serial, 5, 2))::integer <=
                     CASE (substr(p_serial, 3, 2))::integer
                         WHEN 2 THEN (28 + ((((((substr(p_serial, 1, 2))::integer +
                         CASE
                             WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                             ELSE 1900
                         END) % 4) = 0) AND (((((substr(p_serial, 1, 2))::integer +
                         CASE
                             WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                             ELSE 1900
                         END) % 100) <> 0) OR ((((substr(p_serial, 1, 2))::integer +
                         CASE
                             WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                             ELSE 1900
                         END) % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 3, 2))::integer + ((substr(p_serial, 3, 2))::integer / 8)) % 2))
                     END)) AND ((substr(p_serial, 7, 2))::integer < 24) AND ((substr(p_serial, 9, 2))::integer < 60) AND ((substr(p_serial, 11, 2))::integer < 60) AND (substr(p_serial, 13, 5) <> '00000'::text))
                     ELSE false
                 END THEN make_timestamp(((substr(p_serial, 1, 2))::integer +
                 CASE
                     WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                     ELSE 1900
                 END), (substr(p_serial, 3, 2))::integer, (substr(p_serial, 5, 2))::integer, (substr(p_serial, 7, 2))::integer, (substr(p_serial, 9, 2))::integer, ((substr(p_serial, 11, 2))::integer)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'system'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 30) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 11, 4) <> '0000'::text) AND (((substr(p_serial, 15, 2))::integer >= 1) AND ((substr(p_serial, 15, 2))::integer <= 12)) AND ((substr(p_serial, 17, 2))::integer >= 1) AND (((substr(p_serial, 17, 2))::integer <= 28) OR ((substr(p_serial, 17, 2))::integer <=
                     CASE (substr(p_serial, 15, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 11, 4))::integer % 4) = 0) AND ((((substr(p_serial, 11, 4))::integer % 100) <> 0) OR (((substr(p_serial, 11, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 15, 2))::integer + ((substr(p_serial, 15, 2))::integer / 8)) % 2))
                     END)) AND (substr(p_serial, 19, 12) <> '000000000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 11, 4))::integer, (substr(p_serial, 15, 2))::integer, (substr(p_serial, 17, 2))::integer, 0, 0, (0)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             WHEN 'unified'::text THEN
             CASE
                 WHEN
                 CASE
                     WHEN ((length(p_serial) = 28) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 11, 4) <> '0000'::text) AND (((substr(p_serial, 15, 2))::integer >= 1) AND ((substr(p_serial, 15, 2))::integer <= 12)) AND ((substr(p_serial, 17, 2))::integer >= 1) AND (((substr(p_serial, 17, 2))::integer <= 28) OR ((substr(p_serial, 17, 2))::integer <=
                     CASE (substr(p_serial, 15, 2))::integer
                         WHEN 2 THEN (28 + (((((substr(p_serial, 11, 4))::integer % 4) = 0) AND ((((substr(p_serial, 11, 4))::integer % 100) <> 0) OR (((substr(p_serial, 11, 4))::integer % 400) = 0))))::integer)
                         ELSE (30 + (((substr(p_serial, 15, 2))::integer + ((substr(p_serial, 15, 2))::integer / 8)) % 2))
                     END)) AND (substr(p_serial, 19, 10) <> '0000000000'::text))
                     ELSE false
                 END THEN make_timestamp((substr(p_serial, 11, 4))::integer, (substr(p_serial, 15, 2))::integer, (substr(p_serial, 17, 2))::integer, 0, 0, (0)::double precision)
                 ELSE NULL::timestamp without time zone
             END
             ELSE (COALESCE((hivenet.parse_serial(p_serial, p_format) ->> 'datetime'::text), (hivenet.parse_serial(p_serial, p_format) ->> 'date'::text)))::timestamp without time zone
         END AS "coalesce";
END

CREATE OR REPLACE FUNCTION hivenet._serial_valid(p_format text, p_serial text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'id_service'::text THEN
             CASE
                 WHEN ((length(p_serial) = 28) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((substr(p_serial, 13, 4) <> '0000'::text) AND (((substr(p_serial, 17, 2))::integer >= 1) AND ((substr(p_serial, 17, 2))::integer <= 12)) AND ((substr(p_serial, 19, 2))::integer >= 1) AND (((substr(p_serial, 19, 2))::integer <= 28) OR ((substr(p_serial, 19, 2))::integer <=
                 CASE (substr(p_serial, 17, 2))::integer
                     WHEN 2 THEN (28 + (((((substr(p_serial, 13, 4))::integer % 4) = 0) AND ((((substr(p_serial, 13, 4))::integer % 100) <> 0) OR (((substr(p_serial, 13, 4))::integer % 400) = 0))))::integer)
                     ELSE (30 + (((substr(p_serial, 17, 2))::integer + ((substr(p_serial, 17, 2))::integer / 8)) % 2))
                 END)) AND (substr(p_serial, 23, 6) <> '000000'::text))
                 ELSE false
             END
             WHEN 'interface'::text THEN
             CASE
                 WHEN ((length(p_serial) = 39) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]{2}[0-9A-Za-z]{5}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 16, 4) <> '0000'::text) AND (((substr(p_serial, 20, 2))::integer >= 1) AND ((substr(p_serial, 20, 2))::integer <= 12)) AND ((substr(p_serial, 22, 2))::integer >= 1) AND (((substr(p_serial, 22, 2))::integer <= 28) OR ((substr(p_serial, 22, 2))::integer <=
                 CASE (substr(p_serial, 20, 2))::integer
                     WHEN 2 THEN (28 + (((((substr(p_serial, 16, 4))::integer % 4) = 0) AND ((((substr(p_serial, 16, 4))::integer % 100) <> 0) OR (((substr(p_serial, 16, 4))::integer % 400) = 0))))::integer)
                     ELSE (30 + (((substr(p_serial, 20, 2))::integer + ((substr(p_serial, 20, 2))::integer / 8)) % 2))
                 END)) AND ((substr(p_serial, 24, 2))::integer < 24) AND ((substr(p_serial, 26, 2))::integer < 60) AND ((substr(p_serial, 28, 2))::integer < 60) AND (substr(p_serial, 30, 10) <> '0000000000'::text))
                 ELSE false
             END
             WHEN 'merchant_trade'::text THEN
             CASE
                 WHEN ((length(p_serial) = 32) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((substr(p_serial, 13, 4) <> '0000'::text) AND (((substr(p_serial, 17, 2))::integer >= 1) AND ((substr(p_serial, 17, 2))::integer <= 12)) AND ((substr(p_serial, 19, 2))::integer >= 1) AND (((substr(p_serial, 19, 2))::integer <= 28) OR ((substr(p_serial, 19, 2))::integer <=
                 CASE (substr(p_serial, 17, 2))::integer
                     WHEN 2 THEN (28 + (((((substr(p_serial, 13, 4))::integer % 4) = 0) AND ((((substr(p_serial, 13, 4))::integer % 100) <> 0) OR (((substr(p_serial, 13, 4))::integer % 400) = 0))))::integer)
                     ELSE (30 + (((substr(p_serial, 17, 2))::integer + ((substr(p_serial, 17, 2))::integer / 8)) % 2))
                 END)) AND ((substr(p_serial, 21, 2))::integer < 24) AND ((substr(p_serial, 23, 2))::integer < 60) AND ((substr(p_serial, 25, 2))::integer < 60) AND (substr(p_serial, 27, 6) <> '000000'::text))
                 ELSE false
             END
             WHEN 'per_second'::text THEN
             CASE
                 WHEN ((length(p_serial) = 17) AND (p_serial ~ '^[0-9]*$'::text)) THEN ((((substr(p_serial, 3, 2))::integer >= 1) AND ((substr(p_serial, 3, 2))::integer <= 12)) AND ((substr(p_serial, 5, 2))::integer >= 1) AND (((substr(p_serial, 5, 2))::integer <= 28) OR ((substr(p_serial, 5, 2))::integer <=
                 CASE (substr(p_serial, 3, 2))::integer
                     WHEN 2 THEN (28 + ((((((substr(p_serial, 1, 2))::integer +
                     CASE
                         WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                         ELSE 1900
                     END) % 4) = 0) AND (((((substr(p_serial, 1, 2))::integer +
                     CASE
                         WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                         ELSE 1900
                     END) % 100) <> 0) OR ((((substr(p_serial, 1, 2))::integer +
                     CASE
                         WHEN ((substr(p_serial, 1, 2))::integer < 70) THEN 2000
                         ELSE 1900
                     END) % 400) = 0))))::integer)
                     ELSE (30 + (((substr(p_serial, 3, 2))::integer + ((substr(p_serial, 3, 2))::integer / 8)) % 2))
                 END)) AND ((substr(p_serial, 7, 2))::integer < 24) AND ((substr(p_serial, 9, 2))::integer < 60) AND ((substr(p_serial, 11, 2))::integer < 60) AND (substr(p_serial, 13, 5) <> '00000'::text))
                 ELSE false
             END
             WHEN 'system'::text THEN
             CASE
                 WHEN ((length(p_serial) = 30) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 11, 4) <> '0000'::text) AND (((substr(p_serial, 15, 2))::integer >= 1) AND ((substr(p_serial, 15, 2))::integer <= 12)) AND ((substr(p_serial, 17, 2))::integer >= 1) AND (((substr(p_serial, 17, 2))::integer <= 28) OR ((substr(p_serial, 17, 2))::integer <=
                 CASE (substr(p_serial, 15, 2))::integer
                     WHEN 2 THEN (28 + (((((substr(p_serial, 11, 4))::integer % 4) = 0) AND ((((substr(p_serial, 11, 4))::integer % 100) <> 0) OR (((substr(p_serial, 11, 4))::integer % 400) = 0))))::integer)
                     ELSE (30 + (((substr(p_serial, 15, 2))::integer + ((substr(p_serial, 15, 2))::integer / 8)) % 2))
                 END)) AND (substr(p_serial, 19, 12) <> '000000000000'::text))
                 ELSE false
             END
             WHEN 'unified'::text THEN
             CASE
                 WHEN ((length(p_serial) = 28) AND (p_serial ~ '^[0-9A-Za-z]{8}[0-9]*$'::text)) THEN ((substr(p_serial, 9, 2) <> '00'::text) AND (substr(p_serial, 11, 4) <> '0000'::text) AND (((substr(p_serial, 15, 2))::integer >= 1) AND ((substr(p_serial, 15, 2))::integer <= 12)) AND ((substr(p_serial, 17, 2))::integer >= 1) AND (((substr(p_serial, 17, 2))::integer <= 28) OR ((substr(p_serial, 17, 2))::integer <=
                 CASE (substr(p_serial, 15, 2))::integer
                     WHEN 2 THEN (28 + (((((substr(p_serial, 11, 4))::integer % 4) = 0) AND ((((substr(p_serial, 11, 4))::integer % 100) <> 0) OR (((substr(p_serial, 11, 4))::integer % 400) = 0))))::integer)
                     ELSE (30 + (((substr(p_serial, 15, 2))::integer + ((substr(p_serial, 15, 2))::integer / 8)) % 2))
                 END)) AND (substr(p_serial, 19, 10) <> '0000000000'::text))
                 ELSE false
             END
             ELSE NULL::boolean
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._setting_constant(p_name text)
 RETURNS text
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_name
             WHEN 'allow_fake_clock'::text THEN 'false'::text
             WHEN 'check_received_instances'::text THEN 'true'::text
             WHEN 'enforce_registry'::text THEN 'false'::text
             WHEN 'failover_gap'::text THEN '100000'::text
             WHEN 'failover_loss_window'::text THEN '30 seconds'::text
             WHEN 'interface_future_tolerance'::text THEN '5 minutes'::text
             WHEN 'interface_partitions_ahead'::text THEN '2 days'::text
             WHEN 'interface_retention'::text THEN '7 days'::text
             WHEN 'interface_window'::text THEN '1 day'::text
             WHEN 'max_counted_namespaces'::text THEN '100'::text
             WHEN 'max_serials_per_call'::text THEN '10000'::text
             WHEN 'owned_instances'::text THEN 'all'::text
             WHEN 'promote_fallback_scopes'::text THEN ''::text
             WHEN 'request_retention'::text THEN '24 hours'::text
             WHEN 'shared_fallback'::text THEN ''::text
             WHEN 'single_primary_formats'::text THEN 'false'::text
             WHEN 'step_future_tolerance'::text THEN '5 minutes'::text
             WHEN 'step_lease'::text THEN '5 minutes'::text
             WHEN 'step_retention'::text THEN '30 days'::text
             WHEN 'time_zone'::text THEN 'UTC'::text
             ELSE NULL::text
         END AS "case";
END

CREATE OR REPLACE FUNCTION hivenet._step_in_window(p_serial text)
 RETURNS boolean
 LANGUAGE sql
BEGIN ATOMIC
 SELECT ((substr(p_serial, 11, 8) >= to_char(((((hivenet._caller_now(hivenet.now(), 'earliest'::text) - '30 days'::interval))::date + 1))::timestamp with time zone, 'YYYYMMDD'::text)) AND (substr(p_serial, 11, 8) <= to_char((((hivenet._caller_now(hivenet.now(), 'latest'::text) + '00:05:00'::interval))::date)::timestamp with time zone, 'YYYYMMDD'::text)));
END

CREATE OR REPLACE FUNCTION hivenet._time_id_batch(p_format text, p_fields jsonb, OUT high bigint, OUT counter regclass, OUT base bigint, OUT modulus bigint)
 RETURNS record
 LANGUAGE sql
 STABLE
BEGIN ATOMIC
 SELECT
         CASE p_format
             WHEN 'time_id'::text THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND (COALESCE(p_fields, '{}'::jsonb) = '{}'::jsonb)) THEN ((to_char((statement_timestamp() AT TIME ZONE 'UTC'::text), 'YYMMDDHH24MISS'::text))::bigint << 14)
                 ELSE NULL::bigint
             END
             ELSE NULL::bigint
         END AS "case",
         CASE p_format
             WHEN 'time_id'::text THEN
             CASE
                 WHEN ((current_setting('hivenet.timeline_checked'::text, true) = 'true'::text) AND (COALESCE(p_fields, '{}'::jsonb) = '{}'::jsonb)) THEN to_regclass('hivenet."seq_time_id_"'::text)
                 ELSE NULL::regclass
             END
             ELSE NULL::regclass
         END AS "case",
         CASE p_format
             WHEN 'time_id'::text THEN (((floor(date_part('epoch'::text, (statement_timestamp() AT TIME ZONE 'UTC'::text))))::bigint - 946684799) * (1000000000)::bigint)
             ELSE NULL::bigint
         END AS "case",
         CASE p_format
             WHEN 'time_id'::text THEN (16384)::bigint
             ELSE NULL::bigint
         END AS "case";
END
