package berds;

import io.anserini.collection.JsonCollection;
import io.anserini.index.SimpleIndexer;
import io.anserini.search.ScoredDoc;
import io.anserini.search.SimpleSearcher;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Batches between Python and Anserini as flat arrays.
 *
 * <p>Through pyjnius every Java object read from Python costs a proxy object and a call per field: reading
 * batch_search's ScoredDoc[] took about twice Lucene's own search time at k=100, and indexing through
 * addRawDocuments made Python write JSON that Java parsed back. Here arrays cross the bridge in a few calls.
 * The searching and indexing are Anserini's own, unchanged: the same hits, scores, order and index.
 */
public final class LuceneBridge {
  private LuceneBridge() {}

  /** The hits of a batch of queries. Query i's hits are at offsets[i] .. offsets[i + 1] - 1, best first. */
  public static final class Hits {
    public final String[] docids;
    public final float[] scores;
    public final int[] offsets;

    Hits(String[] docids, float[] scores, int[] offsets) {
      this.docids = docids;
      this.scores = scores;
      this.offsets = offsets;
    }
  }

  /** SimpleSearcher.batch_search over the queries, on a pool of the given number of threads. */
  public static Hits search(SimpleSearcher searcher, String[] queries, int k, int threads) {
    String[] qids = new String[queries.length];
    for (int i = 0; i < qids.length; i++) {
      qids[i] = Integer.toString(i);
    }
    Map<String, ScoredDoc[]> found = searcher.batch_search(Arrays.asList(queries), Arrays.asList(qids), k, threads);
    int[] offsets = new int[queries.length + 1];
    for (int i = 0; i < qids.length; i++) {
      ScoredDoc[] hits = found.get(qids[i]);
      offsets[i + 1] = offsets[i] + (hits == null ? 0 : hits.length);
    }
    String[] docids = new String[offsets[queries.length]];
    float[] scores = new float[docids.length];
    for (int i = 0; i < qids.length; i++) {
      ScoredDoc[] hits = found.get(qids[i]);
      for (int j = 0; hits != null && j < hits.length; j++) {
        docids[offsets[i] + j] = hits[j].docid;
        scores[offsets[i] + j] = hits[j].score;
      }
    }
    return new Hits(docids, scores, offsets);
  }

  /**
   * Index passages sent as UTF-8: passage i's id is ids[idEnds[i - 1] .. idEnds[i]) and its contents
   * contents[contentEnds[i - 1] .. contentEnds[i]) (from 0 for i = 0). Each becomes the Document that
   * SimpleIndexer.addRawDocuments makes of {"id": ..., "contents": ...}, built from its fields, and is added
   * with SimpleIndexer.addJsonDocument; the batch is split into one contiguous range per thread, so decoding
   * and building Documents run in parallel too. One byte array crosses the bridge where a String per passage
   * cost more than Lucene's indexing of it. Returns how many passages were indexed.
   */
  public static int addPassages(SimpleIndexer indexer, int threads, byte[] ids, int[] idEnds, byte[] contents,
      int[] contentEnds) throws Exception {
    if (idEnds.length != contentEnds.length) {
      throw new IllegalArgumentException(idEnds.length + " ids but " + contentEnds.length + " contents");
    }
    int n = idEnds.length;
    int parts = Math.max(1, Math.min(threads, n));
    ExecutorService pool = Executors.newFixedThreadPool(parts);
    try {
      List<Future<Integer>> done = new ArrayList<>();
      for (int part = 0; part < parts; part++) {
        int from = (int) ((long) n * part / parts);
        int to = (int) ((long) n * (part + 1) / parts);
        done.add(pool.submit(() -> {
          int added = 0;
          for (int i = from; i < to; i++) {
            int id = i == 0 ? 0 : idEnds[i - 1];
            int text = i == 0 ? 0 : contentEnds[i - 1];
            JsonCollection.Document doc = JsonCollection.Document.fromFields(
                new String(ids, id, idEnds[i] - id, StandardCharsets.UTF_8),
                new String(contents, text, contentEnds[i] - text, StandardCharsets.UTF_8));
            if (indexer.addJsonDocument(doc)) {
              added++;
            }
          }
          return added;
        }));
      }
      int added = 0;
      for (Future<Integer> part : done) {
        try {
          added += part.get();
        } catch (ExecutionException e) {
          throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
        }
      }
      return added;
    } finally {
      pool.shutdownNow();
    }
  }
}
